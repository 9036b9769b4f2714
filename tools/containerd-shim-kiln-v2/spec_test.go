package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v2 "github.com/containerd/cgroups/v2/stats"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestAnnotationsUnknownKiln(t *testing.T) {
	_, err := parseAnnotations(map[string]string{"io.kiln.net.polcy": "{}"})
	if err == nil || !strings.Contains(err.Error(), "annotation io.kiln.net.polcy: unknown io.kiln.* key") {
		t.Fatalf("want the unknown key named, got %v", err)
	}
	if !strings.Contains(err.Error(), annoNetPolicy) {
		t.Fatalf("want the known keys listed, got %v", err)
	}
}

func TestAnnotationsOthersIgnored(t *testing.T) {
	c, err := parseAnnotations(map[string]string{"io.kubernetes.cri.sandbox-id": "x",
		"io.kilnx": "1", "org.example": "y"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, vmConfig{}) {
		t.Fatalf("want an empty config, got %+v", c)
	}
}

func TestAnnotationsPaths(t *testing.T) {
	c, err := parseAnnotations(map[string]string{annoKernel: "/k/vmlinux", annoInitrd: "/k/i.cpio",
		annoImage: "/img/d.json", annoBaseline: "/var/cache/b", annoConsoleLog: "/var/log/c.log"})
	if err != nil {
		t.Fatal(err)
	}
	want := vmConfig{Kernel: "/k/vmlinux", Initrd: "/k/i.cpio", Image: "/img/d.json",
		Baseline: "/var/cache/b", ConsoleLog: "/var/log/c.log"}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v", c)
	}
	_, err = parseAnnotations(map[string]string{annoKernel: "vmlinux"})
	if err == nil || !strings.Contains(err.Error(), "io.kiln.kernel: expected an absolute host path") {
		t.Fatalf("want a relative path refused, got %v", err)
	}
}

func TestAnnotationsPolicy(t *testing.T) {
	c, err := parseAnnotations(map[string]string{annoNetPolicy: `{"tcp":[{"to":"192.0.2.1","ports":[80]}]}`})
	if err != nil || !strings.Contains(string(c.NetPolicy), "192.0.2.1") {
		t.Fatalf("inline policy: %v %s", err, c.NetPolicy)
	}
	f := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(f, []byte(`{"udp":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = parseAnnotations(map[string]string{annoNetPolicy: f})
	if err != nil || string(c.NetPolicy) != `{"udp":[]}` {
		t.Fatalf("policy file: %v %s", err, c.NetPolicy)
	}
	for _, bad := range []string{"allow-all", "[1]", "{nope", filepath.Join(f, "missing")} {
		if _, err := parseAnnotations(map[string]string{annoNetPolicy: bad}); err == nil ||
			!strings.HasPrefix(err.Error(), "annotation io.kiln.net.policy: ") {
			t.Fatalf("policy %q: want an error naming the annotation, got %v", bad, err)
		}
	}
}

func TestVMArgs(t *testing.T) {
	c := vmConfig{Kernel: "/k", NetPolicy: json.RawMessage(`{}`), CPUs: 2, MemoryMiB: 576}
	got := strings.Join(vmmArgs(&c, "/s/share", "/s/vm.sock", "/s/pid", "/s/policy.json"), " ")
	want := "start --detach --die-with-parent --pid-file /s/pid --control-socket /s/vm.sock " +
		"--cpus 2 --memory 576 --mount /run/kiln-pod=bind:/s/share:rw:passthrough " +
		"--kernel /k --net auto --net-policy /s/policy.json"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	c = vmConfig{CPUs: 1, MemoryMiB: 256}
	got = strings.Join(vmmArgs(&c, "/s", "/v", "/p", "/n"), " ")
	if strings.Contains(got, "--net") || strings.Contains(got, "--kernel") {
		t.Fatalf("no policy, no kernel: got %s", got)
	}
}

func i64(v int64) *int64   { return &v }
func u64(v uint64) *uint64 { return &v }

func TestSizeVM(t *testing.T) {
	res := func(q int64, p uint64, m int64) *specs.Spec {
		return &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{
			CPU:    &specs.LinuxCPU{Quota: i64(q), Period: u64(p)},
			Memory: &specs.LinuxMemory{Limit: i64(m)}}}}
	}
	pod := func(s *specs.Spec, q, p, m string) *specs.Spec {
		s.Annotations = map[string]string{annoCRISandboxCPUQuota: q,
			annoCRISandboxCPUPeriod: p, annoCRISandboxMemory: m, annoCRIType: criTypeSandbox}
		return s
	}
	for _, tc := range []struct {
		what      string
		spec      *specs.Spec
		cpus      int
		memoryMiB int64
	}{
		{"no resources", &specs.Spec{}, 1, defaultMemoryMiB},
		{"1.5 CPUs, 512 MiB", res(150000, 100000, 512<<20), 2, 512 + guestOverheadMiB},
		{"clamped", res(1000*100000, 100000, 1<<20), maxCPUs, minMemoryMiB},
		{"no quota (-1), no limit (0)", res(-1, 100000, 0), 1, defaultMemoryMiB},
		// the pod's sum over the sandbox's own (the pause container's)
		{"the pod's 2.2 CPUs and 1 GiB", pod(res(50000, 100000, 64<<20), "220000", "100000", "1073741824"),
			3, 1024 + guestOverheadMiB},
		// a pod without limits: the kubelet's zeros leave the sandbox's own
		{"the pod's zeros", pod(res(150000, 100000, 512<<20), "0", "0", "0"), 2, 512 + guestOverheadMiB},
		{"the pod's memory only", pod(&specs.Spec{}, "0", "100000", "300000000"), 1, 287 + guestOverheadMiB},
	} {
		var c vmConfig
		if err := sizeVM(&c, tc.spec); err != nil || c.CPUs != tc.cpus || c.MemoryMiB != tc.memoryMiB {
			t.Errorf("%s: %+v, %v; want %d CPUs, %d MiB", tc.what, c, err, tc.cpus, tc.memoryMiB)
		}
	}
	var c vmConfig
	err := sizeVM(&c, pod(&specs.Spec{}, "lots", "100000", "0"))
	if err == nil || err.Error() != `annotation io.kubernetes.cri.sandbox-cpu-quota: expected an integer, got "lots"` {
		t.Errorf("a bad annotation: %v", err)
	}
}

func TestContainerCreate(t *testing.T) {
	s := &specs.Spec{
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "web",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue"},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"ro"}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"mode=1777"}},
			{Destination: "/etc/hosts", Type: "bind", Source: "/var/lib/x/hosts", Options: []string{"rbind", "ro"}},
			{Destination: "/data", Source: "/srv/data", Options: []string{"rbind"}},
		},
	}
	p, binds, err := containerCreate("c1", s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	want := `{"id":"c1","root":"/run/kiln-pod/c1","rootReadonly":true,"hostname":"web","mounts":[` +
		`{"destination":"/dev/mqueue","type":"mqueue"},` +
		`{"destination":"/sys/fs/cgroup","type":"cgroup2","options":["ro"]},` +
		`{"destination":"/run","type":"tmpfs","options":["mode=1777"]},` +
		`{"destination":"/etc/hosts","type":"bind","source":"/run/kiln-pod/c1.m5","options":["rbind","ro"]},` +
		`{"destination":"/data","type":"bind","source":"/run/kiln-pod/c1.m6","options":["rbind"]}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	wantBinds := []hostBind{{"/var/lib/x/hosts", "c1.m5"}, {"/srv/data", "c1.m6"}}
	if !reflect.DeepEqual(binds, wantBinds) {
		t.Fatalf("binds %+v", binds)
	}
}

func TestContainerCreateRefuses(t *testing.T) {
	cases := map[string]specs.Mount{
		`type "nfs" is not supported`:                {Destination: "/x", Type: "nfs", Source: "h:/e"},
		`a bind mount needs an absolute host source`: {Destination: "/x", Type: "bind", Source: "rel"},
		`expected an absolute path`:                  {Destination: "x", Type: "tmpfs"},
	}
	for msg, m := range cases {
		_, _, err := containerCreate("c", &specs.Spec{Mounts: []specs.Mount{m}})
		if err == nil || !strings.Contains(err.Error(), msg) || !strings.HasPrefix(err.Error(), "mounts[0]") {
			t.Errorf("%+v: want %q, got %v", m, msg, err)
		}
	}
	_, _, err := containerCreate("c", &specs.Spec{Hostname: strings.Repeat("h", 65)})
	if err == nil {
		t.Error("a 65-byte hostname was taken")
	}
}

func TestProcessSpawn(t *testing.T) {
	p := &specs.Process{
		Args: []string{"sh", "-c", "id"}, Env: []string{"PATH=/bin", "A=b"}, Cwd: "/work",
		User:            specs.User{UID: 1000, GID: 100, AdditionalGids: []uint32{5, 6}},
		Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: ^uint64(0)}},
		NoNewPrivileges: true,
	}
	pp, err := processSpawn("c1", p, false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(pp)
	want := `{"argv":["sh","-c","id"],"env":["PATH=/bin","A=b"],"cwd":"/work","container":"c1",` +
		`"uid":1000,"gid":100,"additionalGids":[5,6],` +
		`"rlimits":[{"type":"RLIMIT_NOFILE","soft":1024,"hard":-1}],"noNewPrivileges":true,"stdin":false}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	p.Terminal = true
	p.ConsoleSize = &specs.Box{Height: 40, Width: 120}
	pp, _ = processSpawn("c1", p, true)
	if pp.Rows != 40 || pp.Cols != 120 || pp.Stdin != nil {
		t.Fatalf("terminal: %+v", pp)
	}
	if _, err := processSpawn("c1", &specs.Process{}, false); err == nil {
		t.Fatal("an empty command was taken")
	}
	_, err = processSpawn("c1", &specs.Process{Args: []string{"x"}, User: specs.User{Username: "www"}}, false)
	if err == nil || !strings.Contains(err.Error(), "username") {
		t.Fatalf("a user name: %v", err)
	}
}

func exitOf(t *testing.T, js string) uint32 {
	var e streamExit
	if err := json.Unmarshal([]byte(js), &e); err != nil {
		t.Fatal(err)
	}
	return exitStatus(&e)
}

func TestExitStatus(t *testing.T) {
	cases := map[string]uint32{
		`{"stream":3,"exitCode":0,"timedOut":false}`:               0,
		`{"stream":3,"exitCode":7,"timedOut":false}`:               7,
		`{"stream":3,"exitCode":143,"timedOut":false,"signal":15}`: 143,
		`{"stream":3,"exitCode":137,"timedOut":false,"signal":9}`:  137,
		`{"stream":3,"error":"agent connection broke"}`:            137,
		`{"stream":3,"exitCode":300}`:                              137,
	}
	for js, want := range cases {
		if got := exitOf(t, js); got != want {
			t.Errorf("%s: got %d, want %d", js, got, want)
		}
	}
}

func TestCgroupMetrics(t *testing.T) {
	var m vmMetrics
	js := `{"vcpus":[{"id":0,"cpuNs":2500000},{"id":1,"cpuNs":1500000}],
		"devices":[{"name":"virtio-blk0","type":"virtio-blk","requests":10,"bytesFromGuest":4096,"bytesToGuest":8192},
		{"name":"virtio-fs0","type":"virtio-fs","requests":99,"bytesFromGuest":1,"bytesToGuest":1}],
		"process":{"rssBytes":1048576,"anonBytes":524288}}`
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	got := cgroupMetrics(&m, 3)
	want := &v2.Metrics{
		Pids:   &v2.PidsStat{Current: 3},
		CPU:    &v2.CPUStat{UsageUsec: 4000},
		Memory: &v2.MemoryStat{Usage: 1048576, Anon: 524288},
		Io:     &v2.IOStat{Usage: []*v2.IOEntry{{Rbytes: 8192, Wbytes: 4096, Rios: 10}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
}

func TestPodNetns(t *testing.T) {
	for _, tc := range []struct {
		ns   []specs.LinuxNamespace
		want string
		err  string
	}{
		{nil, "", ""},
		// ctr run's default: a new one, which the VM's own network is
		{[]specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}}, "", ""},
		{[]specs.LinuxNamespace{{Type: specs.IPCNamespace, Path: "/proc/1/ns/ipc"},
			{Type: specs.NetworkNamespace, Path: "/var/run/netns/cni-1"}}, "/var/run/netns/cni-1", ""},
		{[]specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "netns/x"}}, "",
			`the network namespace's path "netns/x": expected an absolute host path`},
	} {
		got, err := podNetns(&specs.Spec{Linux: &specs.Linux{Namespaces: tc.ns}})
		if got != tc.want || (err == nil) != (tc.err == "") ||
			(err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: got %q, %v", tc.ns, got, err)
		}
	}
	if got, err := podNetns(&specs.Spec{}); got != "" || err != nil {
		t.Errorf("no linux: got %q, %v", got, err)
	}
}
