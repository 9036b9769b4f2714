// containerd's task API (runtime v2) served by the shim library: each
// call becomes control-API requests to the pod's VM.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/log"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/runtime"
	"github.com/containerd/containerd/runtime/v2/shim"
	taskAPI "github.com/containerd/containerd/runtime/v2/task"
	"github.com/containerd/fifo"
	"github.com/containerd/typeurl"
	ptypes "github.com/gogo/protobuf/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

const shimVersion = "kiln-v2"

type process struct {
	mu         sync.Mutex
	c          *container
	execID     string
	spec       *specs.Process
	stdinPath  string
	stdoutPath string
	stderrPath string
	terminal   bool
	stdin      io.ReadWriteCloser
	stdout     io.WriteCloser
	stderr     io.WriteCloser
	stream     int
	pid        uint32
	status     task.Status
	exitStatus uint32
	exitedAt   time.Time
	done       chan struct{}
}

type container struct {
	id     string
	bundle string
	spec   *specs.Spec
	init   *process
	execs  map[string]*process
	// host mount points this container added: beneath the share, then
	// the bundle's rootfs if the shim mounted it
	mounts []string
}

type service struct {
	mu         sync.Mutex
	ctx        context.Context
	publisher  shim.Publisher
	shutdown   func()
	vm         *vm
	containers map[string]*container
}

func newService(ctx context.Context, id string, publisher shim.Publisher, shutdown func()) (shim.Shim, error) {
	return &service{ctx: ctx, publisher: publisher, shutdown: shutdown,
		containers: map[string]*container{}}, nil
}

func (s *service) publish(topic string, ev interface{}) {
	ctx := namespaces.WithNamespace(context.Background(), namespaceOf(s.ctx))
	if err := s.publisher.Publish(ctx, topic, ev); err != nil {
		fmt.Fprintf(os.Stderr, "kiln shim: publish %s: %v\n", topic, err)
	}
}

func namespaceOf(ctx context.Context) string {
	ns, _ := namespaces.Namespace(ctx)
	return ns
}

func readSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s/config.json: %w", bundle, err)
	}
	return &s, nil
}

// group: the pod's sandbox id for a container of a pod, else its own id.
func group(id string, s *specs.Spec) string {
	if g, ok := s.Annotations[annoCRISandboxID]; ok && g != "" {
		return g
	}
	return id
}

// StartShim is the `start` subcommand: one shim (and VM) per pod, so the
// containers of a pod find the socket of its sandbox's shim.
func (s *service) StartShim(ctx context.Context, opts shim.StartOpts) (string, error) {
	spec, err := readSpec(".")
	if err != nil {
		return "", err
	}
	grouping := group(opts.ID, spec)
	address, err := shim.SocketAddress(ctx, opts.Address, grouping)
	if err != nil {
		return "", err
	}
	socket, err := shim.NewSocket(address)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return "", fmt.Errorf("create new shim socket: %w", err)
		}
		if shim.CanConnect(address) {
			if err := shim.WriteAddress("address", address); err != nil {
				return "", err
			}
			return address, nil
		}
		if err := shim.RemoveSocket(address); err != nil {
			return "", fmt.Errorf("remove pre-existing socket: %w", err)
		}
		if socket, err = shim.NewSocket(address); err != nil {
			return "", fmt.Errorf("create new shim socket again: %w", err)
		}
	}
	f, err := socket.File()
	// the daemon serves the socket: closing the start's copy must leave it
	socket.SetUnlinkOnClose(false)
	socket.Close()
	if err != nil {
		_ = shim.RemoveSocket(address)
		return "", err
	}
	defer f.Close()
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	args := []string{"-namespace", namespaceOf(ctx), "-id", opts.ID, "-address", opts.Address}
	if opts.Debug {
		args = append(args, "-debug")
	}
	// stdin, stdout and stderr /dev/null, the socket as fd 3 (what the
	// shim library's daemon serves)
	cmd := exec.Command(self, args...)
	cmd.Dir, _ = os.Getwd()
	cmd.Env = os.Environ()
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = shim.RemoveSocket(address)
		return "", err
	}
	go cmd.Wait()
	if err := shim.WriteAddress("address", address); err != nil {
		return "", err
	}
	return address, nil
}

// Cleanup is the `delete` subcommand, run when the shim is gone: the VM
// went with it (--die-with-parent); make sure, and undo the host mounts.
func (s *service) Cleanup(ctx context.Context) (*taskAPI.DeleteResponse, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	id := filepath.Base(cwd)
	if b, err := os.ReadFile(filepath.Join(cwd, bundleVMFile)); err == nil {
		dir := string(b)
		sock := filepath.Join(dir, "vm.sock")
		if pb, err := os.ReadFile(filepath.Join(dir, "vmm.pid")); err == nil {
			var pid int
			fmt.Sscan(string(pb), &pid)
			if pidAlive(pid) && isVMM(pid, sock) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		share := filepath.Join(dir, "share")
		if ents, err := os.ReadDir(share); err == nil {
			for _, e := range ents {
				n := e.Name()
				if n == id || len(n) > len(id) && n[:len(id)+1] == id+"." {
					unmount(filepath.Join(share, n))
				}
			}
			if ents, _ := os.ReadDir(share); len(ents) == 0 {
				cleanupDir(dir)
			}
		}
	}
	if err := mount.UnmountAll(filepath.Join(cwd, "rootfs"), 0); err != nil {
		fmt.Fprintf(os.Stderr, "kiln shim: unmount rootfs: %v\n", err)
	}
	return &taskAPI.DeleteResponse{ExitedAt: time.Now(), ExitStatus: exitLost}, nil
}

func (s *service) get(id, execID string) (*container, *process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.containers[id]
	if c == nil {
		return nil, nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	if execID == "" {
		return c, c.init, nil
	}
	p := c.execs[execID]
	if p == nil {
		return nil, nil, fmt.Errorf("exec %s in container %s: %w", execID, id, errdefs.ErrNotFound)
	}
	return c, p, nil
}

func newProcess(c *container, execID string, spec *specs.Process, stdin, stdout, stderr string, terminal bool) *process {
	return &process{c: c, execID: execID, spec: spec, stdinPath: stdin,
		stdoutPath: stdout, stderrPath: stderr, terminal: terminal,
		status: task.StatusCreated, done: make(chan struct{})}
}

func (s *service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (_ *taskAPI.CreateTaskResponse, retErr error) {
	spec, err := readSpec(r.Bundle)
	if err != nil {
		return nil, err
	}
	cfg, err := parseAnnotations(spec.Annotations)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	if spec.Process != nil && spec.Process.Terminal != r.Terminal {
		spec.Process.Terminal = r.Terminal
	}
	params, binds, err := containerCreate(r.ID, spec)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	if cfg.Netns, err = podNetns(spec); err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	if spec.Process != nil {
		if _, err := processSpawn(r.ID, spec.Process, false); err != nil {
			return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.containers[r.ID] != nil {
		return nil, fmt.Errorf("container %s: %w", r.ID, errdefs.ErrAlreadyExists)
	}
	if s.vm == nil {
		if err := sizeVM(&cfg, spec); err != nil {
			return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
		}
		dir := vmDirFor(namespaceOf(ctx), group(r.ID, spec))
		v, err := vmStart(dir, &cfg)
		if err != nil {
			cleanupDir(dir)
			return nil, err
		}
		s.vm = v
	}
	c := &container{id: r.ID, bundle: r.Bundle, spec: spec, execs: map[string]*process{}}
	defer func() {
		if retErr != nil {
			for i := len(c.mounts) - 1; i >= 0; i-- {
				unmount(c.mounts[i])
			}
		}
	}()
	if err := os.WriteFile(filepath.Join(r.Bundle, bundleVMFile), []byte(s.vm.dir), 0o600); err != nil {
		return nil, err
	}
	rootfs := filepath.Join(r.Bundle, "rootfs")
	if spec.Root != nil && spec.Root.Path != "" {
		if filepath.IsAbs(spec.Root.Path) {
			rootfs = spec.Root.Path
		} else {
			rootfs = filepath.Join(r.Bundle, spec.Root.Path)
		}
	}
	if len(r.Rootfs) > 0 {
		var ms []mount.Mount
		for _, m := range r.Rootfs {
			ms = append(ms, mount.Mount{Type: m.Type, Source: m.Source, Options: m.Options})
		}
		if err := os.MkdirAll(rootfs, 0o711); err != nil {
			return nil, err
		}
		if err := mount.All(ms, rootfs); err != nil {
			return nil, fmt.Errorf("mount the rootfs: %w", err)
		}
		c.mounts = append(c.mounts, rootfs)
	}
	root := filepath.Join(s.vm.share, r.ID)
	if err := bindInto(rootfs, root); err != nil {
		return nil, fmt.Errorf("share the rootfs: %w", err)
	}
	c.mounts = append(c.mounts, root)
	for _, b := range binds {
		dst := filepath.Join(s.vm.share, b.Name)
		if err := bindInto(b.Source, dst); err != nil {
			return nil, fmt.Errorf("share the mount source %s: %w", b.Source, err)
		}
		c.mounts = append(c.mounts, dst)
	}
	if err := s.vm.rpc.call("container.create", params, nil); err != nil {
		return nil, fmt.Errorf("container.create: %w", err)
	}
	c.init = newProcess(c, "", spec.Process, r.Stdin, r.Stdout, r.Stderr, r.Terminal)
	s.containers[r.ID] = c
	s.publish(runtime.TaskCreateEventTopic, &eventstypes.TaskCreate{
		ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs,
		IO: &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal},
	})
	return &taskAPI.CreateTaskResponse{}, nil
}

// The stream's output goes to the FIFOs containerd gave; its exit is the
// process's.
func (p *process) output(method string, data []byte) {
	w := p.stdout
	if method == "stream.stderr" {
		w = p.stderr
	}
	if w != nil {
		_, _ = w.Write(data)
	}
}

func (p *process) exited(e *streamExit) {
	p.mu.Lock()
	if p.status == task.StatusStopped {
		p.mu.Unlock()
		return
	}
	p.status = task.StatusStopped
	p.exitStatus = exitStatus(e)
	p.exitedAt = time.Now()
	p.mu.Unlock()
	log.L.WithField("id", p.c.id).WithField("exec", p.execID).
		Infof("stream %d ended: status %d", p.stream, p.exitStatus)
	for _, w := range []io.WriteCloser{p.stdout, p.stderr} {
		if w != nil {
			w.Close()
		}
	}
	close(p.done)
}

func (s *service) watchExit(p *process) {
	<-p.done
	id := p.execID
	if id == "" {
		id = p.c.id
	}
	s.publish(runtime.TaskExitEventTopic, &eventstypes.TaskExit{
		ContainerID: p.c.id, ID: id, Pid: p.pid,
		ExitStatus: p.exitStatus, ExitedAt: p.exitedAt})
}

func openOutput(path string) (io.WriteCloser, error) {
	if path == "" {
		return nil, nil
	}
	// read-write: never blocks on open, and a reader going away costs
	// no SIGPIPE
	return fifo.OpenFifo(context.Background(), path, syscall.O_RDWR, 0)
}

func (s *service) startProcess(p *process) error {
	v := s.vm
	params, err := processSpawn(p.c.id, p.spec, p.stdinPath != "")
	if err != nil {
		return err
	}
	if p.stdout, err = openOutput(p.stdoutPath); err != nil {
		return fmt.Errorf("stdout %s: %w", p.stdoutPath, err)
	}
	if !p.terminal {
		if p.stderr, err = openOutput(p.stderrPath); err != nil {
			return fmt.Errorf("stderr %s: %w", p.stderrPath, err)
		}
	}
	method := "spawn"
	if p.terminal {
		method = "pty.open"
	}
	var res struct {
		Stream int    `json:"stream"`
		Pid    uint32 `json:"pid"`
	}
	if err := v.rpc.call(method, params, &res); err != nil {
		if p.stdout != nil {
			p.stdout.Close()
		}
		if p.stderr != nil {
			p.stderr.Close()
		}
		return fmt.Errorf("%s: %w", method, err)
	}
	log.L.WithField("id", p.c.id).WithField("exec", p.execID).
		Infof("%s: stream %d, guest pid %d", method, res.Stream, res.Pid)
	p.mu.Lock()
	p.stream, p.pid, p.status = res.Stream, res.Pid, task.StatusRunning
	p.mu.Unlock()
	v.rpc.attach(res.Stream, p)
	go s.watchExit(p)
	if p.stdinPath != "" {
		in, err := fifo.OpenFifo(context.Background(), p.stdinPath, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			p.stdin = in
			go copyStdin(v.rpc, res.Stream, in)
		}
	}
	return nil
}

// copyStdin forwards the stdin FIFO to the stream, one answered write at
// a time (the API's backpressure), then its end of file.
func copyStdin(rpc *rpcClient, stream int, in io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if rpc.call("spawn.write", map[string]interface{}{"stream": stream, "data": buf[:n]}, nil) != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	_ = rpc.call("spawn.closeStdin", map[string]interface{}{"stream": stream}, nil)
}

func (s *service) Start(ctx context.Context, r *taskAPI.StartRequest) (*taskAPI.StartResponse, error) {
	log.G(ctx).WithField("id", r.ID).WithField("exec", r.ExecID).Debug("start")
	c, p, err := s.get(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	st := p.status
	p.mu.Unlock()
	if st != task.StatusCreated {
		return nil, fmt.Errorf("process already started: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.startProcess(p); err != nil {
		log.G(ctx).WithError(err).WithField("id", r.ID).WithField("exec", r.ExecID).Warn("start")
		return nil, err
	}
	if r.ExecID == "" {
		s.publish(runtime.TaskStartEventTopic, &eventstypes.TaskStart{ContainerID: c.id, Pid: p.pid})
	} else {
		s.publish(runtime.TaskExecStartedEventTopic, &eventstypes.TaskExecStarted{
			ContainerID: c.id, ExecID: r.ExecID, Pid: p.pid})
	}
	return &taskAPI.StartResponse{Pid: p.pid}, nil
}

func (s *service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	c, p, err := s.get(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	st := p.status
	p.mu.Unlock()
	log.L.WithField("id", r.ID).WithField("exec", r.ExecID).Infof("delete: status %v", st)
	if st == task.StatusRunning {
		return nil, fmt.Errorf("process %s is running: %w", r.ID, errdefs.ErrFailedPrecondition)
	}
	if r.ExecID != "" {
		s.mu.Lock()
		delete(c.execs, r.ExecID)
		s.mu.Unlock()
		return &taskAPI.DeleteResponse{Pid: p.pid, ExitStatus: p.exitStatus, ExitedAt: p.exitedAt}, nil
	}
	err = s.vm.rpc.call("container.delete", map[string]string{"id": c.id}, nil)
	if re, ok := err.(*rpcError); err != nil && !(ok && re.errno() == "ENOENT") && err != errVMGone {
		return nil, fmt.Errorf("container.delete: %w", err)
	}
	for i := len(c.mounts) - 1; i >= 0; i-- {
		unmount(c.mounts[i])
	}
	s.mu.Lock()
	delete(s.containers, c.id)
	s.mu.Unlock()
	s.publish(runtime.TaskDeleteEventTopic, &eventstypes.TaskDelete{
		ContainerID: c.id, Pid: p.pid, ExitStatus: p.exitStatus, ExitedAt: p.exitedAt})
	return &taskAPI.DeleteResponse{Pid: p.pid, ExitStatus: p.exitStatus, ExitedAt: p.exitedAt}, nil
}

func (s *service) Exec(ctx context.Context, r *taskAPI.ExecProcessRequest) (*ptypes.Empty, error) {
	log.G(ctx).WithField("id", r.ID).WithField("exec", r.ExecID).
		Debugf("exec: terminal %v, stdin %q", r.Terminal, r.Stdin)
	c, _, err := s.get(r.ID, "")
	if err != nil {
		return nil, err
	}
	var ps specs.Process
	if r.Spec == nil || json.Unmarshal(r.Spec.Value, &ps) != nil {
		return nil, fmt.Errorf("exec %s: no process spec: %w", r.ExecID, errdefs.ErrInvalidArgument)
	}
	ps.Terminal = r.Terminal
	if _, err := processSpawn(c.id, &ps, false); err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	if c.execs[r.ExecID] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("exec %s: %w", r.ExecID, errdefs.ErrAlreadyExists)
	}
	c.execs[r.ExecID] = newProcess(c, r.ExecID, &ps, r.Stdin, r.Stdout, r.Stderr, r.Terminal)
	s.mu.Unlock()
	s.publish(runtime.TaskExecAddedEventTopic, &eventstypes.TaskExecAdded{ContainerID: c.id, ExecID: r.ExecID})
	return &ptypes.Empty{}, nil
}

func (s *service) State(ctx context.Context, r *taskAPI.StateRequest) (*taskAPI.StateResponse, error) {
	c, p, err := s.get(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &taskAPI.StateResponse{ID: c.id, ExecID: r.ExecID, Bundle: c.bundle, Pid: p.pid,
		Status: p.status, Stdin: p.stdinPath, Stdout: p.stdoutPath, Stderr: p.stderrPath,
		Terminal: p.terminal, ExitStatus: p.exitStatus, ExitedAt: p.exitedAt}, nil
}

func (s *service) Kill(ctx context.Context, r *taskAPI.KillRequest) (*ptypes.Empty, error) {
	c, p, err := s.get(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	st, stream := p.status, p.stream
	if st == task.StatusCreated {
		// never started: it "dies" of the signal
		p.mu.Unlock()
		p.exited(&streamExit{ExitCode: intp(int(128 + r.Signal))})
		return &ptypes.Empty{}, nil
	}
	p.mu.Unlock()
	if st == task.StatusStopped {
		return nil, fmt.Errorf("process already finished: %w", errdefs.ErrNotFound)
	}
	if err := s.vm.rpc.call("spawn.kill", map[string]interface{}{"stream": stream, "signal": r.Signal}, nil); err != nil {
		return nil, fmt.Errorf("spawn.kill: %w", err)
	}
	if r.All && r.ExecID == "" {
		s.killAll(c, r.Signal)
	}
	return &ptypes.Empty{}, nil
}

func intp(v int) *int { return &v }

type containerPids struct {
	ID   string   `json:"id"`
	Pids []uint32 `json:"pids"`
}

func (s *service) pids(c *container) ([]uint32, error) {
	var list []containerPids
	if err := s.vm.rpc.call("container.list", nil, &list); err != nil {
		return nil, err
	}
	for _, e := range list {
		if e.ID == c.id {
			return e.Pids, nil
		}
	}
	return nil, nil
}

// killAll signals every process of the container, those that left the
// init's process group included, by the guest's kill(1).
func (s *service) killAll(c *container, sig uint32) {
	pids, err := s.pids(c)
	if err != nil || len(pids) == 0 {
		return
	}
	argv := []string{"kill", fmt.Sprintf("-%d", sig)}
	for _, pid := range pids {
		argv = append(argv, fmt.Sprint(pid))
	}
	_ = s.vm.rpc.call("exec", map[string]interface{}{"argv": argv, "timeoutMs": 5000}, nil)
}

func (s *service) Pids(ctx context.Context, r *taskAPI.PidsRequest) (*taskAPI.PidsResponse, error) {
	c, _, err := s.get(r.ID, "")
	if err != nil {
		return nil, err
	}
	pids, err := s.pids(c)
	if err != nil {
		return nil, fmt.Errorf("container.list: %w", err)
	}
	res := &taskAPI.PidsResponse{}
	for _, pid := range pids {
		res.Processes = append(res.Processes, &task.ProcessInfo{Pid: pid})
	}
	return res, nil
}

func (s *service) Wait(ctx context.Context, r *taskAPI.WaitRequest) (*taskAPI.WaitResponse, error) {
	log.G(ctx).WithField("id", r.ID).WithField("exec", r.ExecID).Debug("wait")
	_, p, err := s.get(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &taskAPI.WaitResponse{ExitStatus: p.exitStatus, ExitedAt: p.exitedAt}, nil
}

func (s *service) ResizePty(ctx context.Context, r *taskAPI.ResizePtyRequest) (*ptypes.Empty, error) {
	log.G(ctx).WithField("id", r.ID).WithField("exec", r.ExecID).
		Debugf("resizePty: %dx%d", r.Width, r.Height)
	_, p, err := s.get(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	// A client's terminal that has no size yet (ctr's under script(1)
	// with no terminal of its own says 0x0): the guest's pty keeps the
	// size it has (the API takes 1 to 65535).
	if r.Width == 0 || r.Height == 0 {
		return &ptypes.Empty{}, nil
	}
	p.mu.Lock()
	st, stream, term := p.status, p.stream, p.terminal
	p.mu.Unlock()
	if !term || st != task.StatusRunning {
		return &ptypes.Empty{}, nil
	}
	if err := s.vm.rpc.call("pty.resize", map[string]interface{}{"stream": stream,
		"rows": r.Height, "cols": r.Width}, nil); err != nil {
		// a resize lost is no reason to fail the terminal
		log.L.WithError(err).WithField("id", r.ID).Warn("pty.resize")
	}
	return &ptypes.Empty{}, nil
}

func (s *service) CloseIO(ctx context.Context, r *taskAPI.CloseIORequest) (*ptypes.Empty, error) {
	log.G(ctx).WithField("id", r.ID).WithField("exec", r.ExecID).Debugf("closeIO: stdin %v", r.Stdin)
	_, p, err := s.get(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if r.Stdin && p.stdin != nil {
		// ctr asks as soon as its own stdin ends, with what it read
		// last maybe still in the FIFO: the copy takes that first,
		// then sees the end and sends spawn.closeStdin
		drainFifo(p.stdinPath, stdinDrainMax)
		p.stdin.Close()
	}
	return &ptypes.Empty{}, nil
}

// stdinDrainMax bounds CloseIO's wait for the stdin copy to take what
// the client wrote before it asked (a copy stuck on a guest that reads
// nothing must not hold the call).
const stdinDrainMax = 5 * time.Second

// drainFifo waits until the FIFO at path holds no unread bytes, at most
// max: it asks the kernel (TIOCINQ, FIONREAD's name on Linux) through a
// reader of its own that never reads.
func drainFifo(path string, max time.Duration) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	for t0 := time.Now(); time.Since(t0) < max; time.Sleep(2 * time.Millisecond) {
		if n, err := unix.IoctlGetInt(fd, unix.TIOCINQ); err != nil || n == 0 {
			return
		}
	}
}

func (s *service) Stats(ctx context.Context, r *taskAPI.StatsRequest) (*taskAPI.StatsResponse, error) {
	c, _, err := s.get(r.ID, "")
	if err != nil {
		return nil, err
	}
	var m vmMetrics
	if err := s.vm.rpc.call("vm.metrics", nil, &m); err != nil {
		return nil, fmt.Errorf("vm.metrics: %w", err)
	}
	pids, _ := s.pids(c)
	any, err := typeurl.MarshalAny(cgroupMetrics(&m, len(pids)))
	if err != nil {
		return nil, err
	}
	return &taskAPI.StatsResponse{Stats: any}, nil
}

func (s *service) Connect(ctx context.Context, r *taskAPI.ConnectRequest) (*taskAPI.ConnectResponse, error) {
	res := &taskAPI.ConnectResponse{ShimPid: uint32(os.Getpid()), Version: shimVersion}
	if _, p, err := s.get(r.ID, ""); err == nil {
		res.TaskPid = p.pid
	}
	return res, nil
}

// Shutdown: once the pod's last container is deleted, the VM powers off
// and the shim exits.
func (s *service) Shutdown(ctx context.Context, r *taskAPI.ShutdownRequest) (*ptypes.Empty, error) {
	s.mu.Lock()
	log.L.Infof("shutdown: %d containers left", len(s.containers))
	if len(s.containers) > 0 {
		s.mu.Unlock()
		return &ptypes.Empty{}, nil
	}
	v := s.vm
	s.vm = nil
	s.mu.Unlock()
	if v != nil {
		v.stop()
	}
	if address, err := shim.ReadAddress("address"); err == nil {
		_ = shim.RemoveSocket(address)
	}
	// Every event went out synchronously: the library waits for the
	// publisher's close (5 s, then exits with an error) before the shim ends.
	_ = s.publisher.Close()
	s.shutdown()
	return &ptypes.Empty{}, nil
}

func notSupported(what string) error {
	return fmt.Errorf("%s is not supported by the Kiln runtime: %w", what, errdefs.ErrNotImplemented)
}

func (s *service) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*ptypes.Empty, error) {
	return nil, notSupported("pause")
}

func (s *service) Resume(ctx context.Context, r *taskAPI.ResumeRequest) (*ptypes.Empty, error) {
	return nil, notSupported("resume")
}

func (s *service) Checkpoint(ctx context.Context, r *taskAPI.CheckpointTaskRequest) (*ptypes.Empty, error) {
	return nil, notSupported("checkpoint")
}

func (s *service) Update(ctx context.Context, r *taskAPI.UpdateTaskRequest) (*ptypes.Empty, error) {
	return nil, notSupported("update (changing a running VM's resources)")
}
