// containerd-shim-kiln-v2: the pure half. Everything here turns an OCI
// spec, its annotations or a guest answer into what the vmm or
// containerd wants, without touching a process, a file or a socket, so
// that spec_test.go checks it on any host.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Annotations of the Kiln runtime. They describe the VM, so they are read
// from the container that makes it: the pod's sandbox, or the container
// itself when it has no pod (plain `ctr run`).
const (
	annoPrefix     = "io.kiln."
	annoNetPolicy  = "io.kiln.net.policy"
	annoKernel     = "io.kiln.kernel"
	annoInitrd     = "io.kiln.initrd"
	annoImage      = "io.kiln.image"
	annoBaseline   = "io.kiln.baseline"
	annoConsoleLog = "io.kiln.console-log"

	// containerd's CRI plugin marks the containers of a pod with these.
	annoCRIType      = "io.kubernetes.cri.container-type"
	annoCRISandboxID = "io.kubernetes.cri.sandbox-id"
	// ...and a sandbox with the pod's resources, the sum of its
	// containers' (the kubelet's, 1.23 and later; pkg/cri/annotations)
	annoCRISandboxCPUQuota  = "io.kubernetes.cri.sandbox-cpu-quota"
	annoCRISandboxCPUPeriod = "io.kubernetes.cri.sandbox-cpu-period"
	annoCRISandboxMemory    = "io.kubernetes.cri.sandbox-memory"
	criTypeSandbox          = "sandbox"
)

var knownAnnotations = []string{annoBaseline, annoConsoleLog, annoImage,
	annoInitrd, annoKernel, annoNetPolicy}

// Guest paths: the one virtio-fs share of the pod's host directory, and
// each container's root beneath it.
const (
	guestShare = "/run/kiln-pod"
	// the vmm's default when no resources are given (cli.md, --memory)
	defaultMemoryMiB = 256
	// what the guest's kernel, init and agent take besides the limit
	guestOverheadMiB = 64
	minMemoryMiB     = 128
	maxCPUs          = 64
	mib              = 1 << 20
)

// vmConfig is what the vmm is started with, taken from the annotations
// and resources of the container that makes the VM.
type vmConfig struct {
	Kernel     string
	Initrd     string
	Image      string
	Baseline   string
	ConsoleLog string
	// NetPolicy is the policy object (JSON); empty: no network at all.
	NetPolicy json.RawMessage
	CPUs      int
	MemoryMiB int64
	// Netns: the pod's network namespace (a host path), where the vmm
	// runs; empty: the shim's own.
	Netns string
}

// parseAnnotations checks every io.kiln.* key (an unknown one is an
// error naming it: a typo must not silently give a VM without the policy
// asked for) and returns the VM's configuration.
func parseAnnotations(a map[string]string) (vmConfig, error) {
	var c vmConfig
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := a[k]
		if !strings.HasPrefix(k, annoPrefix) {
			continue
		}
		switch k {
		case annoKernel, annoInitrd, annoImage, annoBaseline, annoConsoleLog:
			if !filepath.IsAbs(v) {
				return c, fmt.Errorf("annotation %s: expected an absolute host path, got %q", k, v)
			}
			switch k {
			case annoKernel:
				c.Kernel = v
			case annoInitrd:
				c.Initrd = v
			case annoImage:
				c.Image = v
			case annoBaseline:
				c.Baseline = v
			case annoConsoleLog:
				c.ConsoleLog = v
			}
		case annoNetPolicy:
			p, err := parsePolicy(v)
			if err != nil {
				return c, fmt.Errorf("annotation %s: %w", k, err)
			}
			c.NetPolicy = p
		default:
			return c, fmt.Errorf("annotation %s: unknown io.kiln.* key (known: %s)",
				k, strings.Join(knownAnnotations, ", "))
		}
	}
	return c, nil
}

// parsePolicy takes the policy as JSON (an object) or as the absolute path
// of a policy file; the vmm checks its content.
func parsePolicy(v string) (json.RawMessage, error) {
	t := strings.TrimSpace(v)
	var raw []byte
	switch {
	case strings.HasPrefix(t, "{"):
		raw = []byte(t)
	case filepath.IsAbs(t):
		b, err := os.ReadFile(t)
		if err != nil {
			return nil, err
		}
		raw = b
	default:
		return nil, fmt.Errorf("expected a JSON policy object or an absolute path to a policy file")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	return json.RawMessage(raw), nil
}

// sizeVM sizes the VM from the spec of the container that makes it:
// vCPUs from a CPU quota (quota / period rounded up, at most maxCPUs),
// memory from a limit plus the guest's own overhead (at least
// minMemoryMiB). The quota and the limit are the pod's when the spec
// carries containerd's sandbox sizing annotations (the CRI plugin sets
// them on a sandbox from the kubelet's pod resources: the sum of its
// containers' limits), else the spec's own linux.resources; either
// missing, or not positive, leaves that part at the vmm's default.
func sizeVM(c *vmConfig, s *specs.Spec) error {
	c.CPUs = 1
	c.MemoryMiB = defaultMemoryMiB
	var quota, limit int64
	var period uint64
	if s.Linux != nil && s.Linux.Resources != nil {
		r := s.Linux.Resources
		if r.CPU != nil && r.CPU.Quota != nil && r.CPU.Period != nil {
			quota, period = *r.CPU.Quota, *r.CPU.Period
		}
		if r.Memory != nil && r.Memory.Limit != nil {
			limit = *r.Memory.Limit
		}
	}
	var pq, pl int64
	var pp uint64
	for _, a := range []struct {
		key string
		v   interface{}
	}{{annoCRISandboxCPUQuota, &pq}, {annoCRISandboxCPUPeriod, &pp}, {annoCRISandboxMemory, &pl}} {
		v, ok := s.Annotations[a.key]
		if !ok {
			continue
		}
		var err error
		switch p := a.v.(type) {
		case *int64:
			*p, err = strconv.ParseInt(v, 10, 64)
		case *uint64:
			*p, err = strconv.ParseUint(v, 10, 64)
		}
		if err != nil {
			return fmt.Errorf("annotation %s: expected an integer, got %q", a.key, v)
		}
	}
	if pq > 0 && pp > 0 {
		quota, period = pq, pp
	}
	if pl > 0 {
		limit = pl
	}
	if quota > 0 && period > 0 {
		n := (uint64(quota) + period - 1) / period
		if n > maxCPUs {
			n = maxCPUs
		}
		c.CPUs = int(n)
	}
	if limit > 0 {
		m := (limit+mib-1)/mib + guestOverheadMiB
		if m < minMemoryMiB {
			m = minMemoryMiB
		}
		c.MemoryMiB = m
	}
	return nil
}

// podNetns is the network namespace the spec names by path (what the CRI
// plugin gives a pod's sandbox after CNI, or `ctr run --with-ns
// network:PATH`): "" when it names none, or a new one (no path), which
// leaves the vmm in the shim's namespace.
func podNetns(s *specs.Spec) (string, error) {
	if s.Linux == nil {
		return "", nil
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type != specs.NetworkNamespace || ns.Path == "" {
			continue
		}
		if !filepath.IsAbs(ns.Path) {
			return "", fmt.Errorf("linux.namespaces: the network namespace's path %q: expected an absolute host path", ns.Path)
		}
		return ns.Path, nil
	}
	return "", nil
}

// vmmArgs is the vmm's command line for a pod whose host directory share
// is served at guestShare. The vmm dies with the shim (--die-with-parent:
// a SIGKILLed shim leaves no VM) and returns once the agent answers.
func vmmArgs(c *vmConfig, share, sock, pidFile, policyFile string) []string {
	a := []string{"start", "--detach", "--die-with-parent",
		"--pid-file", pidFile, "--control-socket", sock,
		"--cpus", fmt.Sprint(c.CPUs), "--memory", fmt.Sprint(c.MemoryMiB),
		"--mount", guestShare + "=bind:" + share + ":rw:passthrough"}
	if c.Kernel != "" {
		a = append(a, "--kernel", c.Kernel)
	}
	if c.Initrd != "" {
		a = append(a, "--initrd", c.Initrd)
	}
	if c.Image != "" {
		a = append(a, "--rootfs", c.Image)
	}
	if c.Baseline != "" {
		a = append(a, "--baseline-cache", c.Baseline)
	}
	if c.ConsoleLog != "" {
		a = append(a, "--console-log", c.ConsoleLog)
	}
	if c.NetPolicy != nil {
		a = append(a, "--net", "auto", "--net-policy", policyFile)
	}
	return a
}

// A mount the guest agent makes itself, or one whose source is on the
// host and must be shared into the guest first.
type guestMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// hostBind is a host path the shim must bind beneath the pod's share
// (at share/Name) before container.create.
type hostBind struct {
	Source string
	Name   string
}

type containerParams struct {
	ID           string       `json:"id"`
	Root         string       `json:"root"`
	RootReadonly bool         `json:"rootReadonly,omitempty"`
	Hostname     string       `json:"hostname,omitempty"`
	Mounts       []guestMount `json:"mounts"`
}

// The agent makes these itself, with device nodes a plain tmpfs on /dev
// would lack: the spec's own mounts there are left to it.
var agentDefaultMounts = map[string]bool{
	"/proc": true, "/dev": true, "/dev/pts": true, "/dev/shm": true, "/sys": true,
}

func isBind(m *specs.Mount) bool {
	if m.Type == "bind" {
		return true
	}
	for _, o := range m.Options {
		if o == "bind" || o == "rbind" {
			return true
		}
	}
	return false
}

// containerCreate maps the OCI spec to container.create's params: the
// root is the container's directory beneath the share; host bind mounts
// become binds from the share (returned for the shim to make on the host).
func containerCreate(id string, s *specs.Spec) (containerParams, []hostBind, error) {
	p := containerParams{ID: id, Root: guestShare + "/" + id, Mounts: []guestMount{}}
	var binds []hostBind
	if s.Root != nil {
		p.RootReadonly = s.Root.Readonly
	}
	if len(s.Hostname) > 64 {
		return p, nil, fmt.Errorf("hostname %q: at most 64 bytes", s.Hostname)
	}
	p.Hostname = s.Hostname
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if !filepath.IsAbs(m.Destination) {
			return p, nil, fmt.Errorf("mounts[%d].destination %q: expected an absolute path", i, m.Destination)
		}
		if agentDefaultMounts[filepath.Clean(m.Destination)] {
			continue
		}
		g := guestMount{Destination: m.Destination, Options: m.Options}
		switch {
		case isBind(m):
			if !filepath.IsAbs(m.Source) {
				return p, nil, fmt.Errorf("mounts[%d] (%s): a bind mount needs an absolute host source, got %q", i, m.Destination, m.Source)
			}
			name := fmt.Sprintf("%s.m%d", id, i)
			binds = append(binds, hostBind{Source: m.Source, Name: name})
			g.Type, g.Source = "bind", guestShare+"/"+name
		case m.Type == "tmpfs", m.Type == "proc", m.Type == "sysfs",
			m.Type == "devpts", m.Type == "mqueue", m.Type == "cgroup2":
			g.Type = m.Type
		case m.Type == "cgroup":
			// the guest has cgroup v2 only
			g.Type = "cgroup2"
		default:
			return p, nil, fmt.Errorf("mounts[%d] (%s): type %q is not supported by the Kiln runtime (bind, tmpfs, proc, sysfs, devpts, mqueue, cgroup, cgroup2)", i, m.Destination, m.Type)
		}
		p.Mounts = append(p.Mounts, g)
	}
	return p, binds, nil
}

type rlimit struct {
	Type string `json:"type"`
	Soft int64  `json:"soft"`
	Hard int64  `json:"hard"`
}

// processParams are the params of spawn / pty.open for an OCI process.
type processParams struct {
	Argv            []string `json:"argv"`
	Env             []string `json:"env,omitempty"`
	Cwd             string   `json:"cwd,omitempty"`
	Container       string   `json:"container"`
	UID             uint32   `json:"uid"`
	GID             uint32   `json:"gid"`
	AdditionalGids  []uint32 `json:"additionalGids,omitempty"`
	Rlimits         []rlimit `json:"rlimits,omitempty"`
	NoNewPrivileges bool     `json:"noNewPrivileges,omitempty"`
	Stdin           *bool    `json:"stdin,omitempty"`
	Rows            uint     `json:"rows,omitempty"`
	Cols            uint     `json:"cols,omitempty"`
}

// OCI says unlimited with the all-ones value; the API with -1.
func rlimitValue(v uint64) int64 {
	if v > 1<<63-1 {
		return -1
	}
	return int64(v)
}

func processSpawn(container string, p *specs.Process, stdin bool) (processParams, error) {
	if p == nil || len(p.Args) == 0 {
		return processParams{}, fmt.Errorf("process.args: the command is empty")
	}
	if p.User.Username != "" {
		return processParams{}, fmt.Errorf("process.user.username %q: not supported (the guest does not read the container's /etc/passwd: give uid and gid)", p.User.Username)
	}
	pp := processParams{
		Argv:            p.Args,
		Env:             p.Env,
		Cwd:             p.Cwd,
		Container:       container,
		UID:             p.User.UID,
		GID:             p.User.GID,
		NoNewPrivileges: p.NoNewPrivileges,
	}
	if len(p.User.AdditionalGids) > 0 {
		pp.AdditionalGids = p.User.AdditionalGids
	}
	for _, r := range p.Rlimits {
		pp.Rlimits = append(pp.Rlimits, rlimit{Type: r.Type,
			Soft: rlimitValue(r.Soft), Hard: rlimitValue(r.Hard)})
	}
	if p.Terminal {
		if p.ConsoleSize != nil && p.ConsoleSize.Height > 0 && p.ConsoleSize.Width > 0 {
			pp.Rows, pp.Cols = p.ConsoleSize.Height, p.ConsoleSize.Width
		}
	} else if !stdin {
		f := false
		pp.Stdin = &f
	}
	return pp, nil
}

// The API's stream.exit: exitCode is 128+N already when signal N killed
// the process; a broken agent connection has only "error".
type streamExit struct {
	Stream   int     `json:"stream"`
	ExitCode *int    `json:"exitCode"`
	Signal   int     `json:"signal"`
	TimedOut bool    `json:"timedOut"`
	Error    *string `json:"error"`
}

// The status containerd reports: the guest's own for a process that ended
// (128+N for signal N), and 137 (SIGKILL) for one whose VM or agent went
// away under it, which is what happened to it.
const exitLost = 128 + 9

func exitStatus(e *streamExit) uint32 {
	if e.ExitCode == nil {
		return exitLost
	}
	if *e.ExitCode < 0 || *e.ExitCode > 255 {
		return exitLost
	}
	if e.Signal > 0 && *e.ExitCode == 0 {
		return uint32(128 + e.Signal)
	}
	return uint32(*e.ExitCode)
}
