package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v2 "github.com/containerd/cgroups/v2/stats"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/events"
	"github.com/containerd/containerd/namespaces"
	taskAPI "github.com/containerd/containerd/runtime/v2/task"
	"github.com/containerd/typeurl"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

type topics struct {
	mu   sync.Mutex
	seen []string
}

func (p *topics) Publish(ctx context.Context, topic string, ev events.Event) error {
	p.mu.Lock()
	p.seen = append(p.seen, topic)
	p.mu.Unlock()
	return nil
}

func (p *topics) Close() error { return nil }

// guestAPI is the control API as the shim uses it: it records each
// request's params, answers spawn with a stream whose first output is
// "hello\n", ends a stream on spawn.kill with 128+N and signal N.
type guestAPI struct {
	mu     sync.Mutex
	params map[string]json.RawMessage
	conn   io.Writer
}

func (g *guestAPI) got(method string) json.RawMessage {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.params[method]
}

func (g *guestAPI) serve(t *testing.T, sock string) {
	l, err := unixListen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer l.Close()
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			var req struct {
				ID     uint64          `json:"id"`
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			if json.Unmarshal(sc.Bytes(), &req) != nil {
				return
			}
			g.mu.Lock()
			g.params[req.Method] = req.Params
			g.mu.Unlock()
			id := jsonNum(req.ID)
			reply := `{"jsonrpc":"2.0","id":` + id + `,"result":{}}` + "\n"
			switch req.Method {
			case "spawn", "pty.open":
				reply = `{"jsonrpc":"2.0","id":` + id + `,"result":{"stream":5,"pid":77}}` + "\n" +
					`{"jsonrpc":"2.0","method":"stream.stdout","params":{"stream":5,"data":"aGVsbG8K"}}` + "\n"
			case "spawn.kill":
				var p struct {
					Signal int `json:"signal"`
				}
				json.Unmarshal(req.Params, &p)
				reply += `{"jsonrpc":"2.0","method":"stream.exit","params":{"stream":5,"exitCode":` +
					jsonNum(uint64(128+p.Signal)) + `,"signal":` + jsonNum(uint64(p.Signal)) + `,"timedOut":false}}` + "\n"
			case "container.list":
				reply = `{"jsonrpc":"2.0","id":` + id + `,"result":[{"id":"other","pids":[3]},{"id":"c1","pids":[77,78]}]}` + "\n"
			case "vm.metrics":
				reply = `{"jsonrpc":"2.0","id":` + id + `,"result":{"vcpus":[{"id":0,"cpuNs":7000000}],"devices":[],"process":{"rssBytes":4096,"anonBytes":2048}}}` + "\n"
			}
			conn.Write([]byte(reply))
		}
	}()
}

// The task API driven as containerd drives it for `ctr run`, against a
// fake control API: what reaches the guest, the FIFO, the exit status, the
// events. Needs root (the rootfs is bind-mounted beneath the share).
func TestServiceRunKillDelete(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Create bind-mounts the rootfs beneath the share")
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "c1")
	os.MkdirAll(filepath.Join(bundle, "rootfs", "bin"), 0o755)
	spec := specs.Spec{
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: "web",
		Process: &specs.Process{Args: []string{"sleep", "600"}, Env: []string{"PATH=/bin"},
			Cwd: "/", User: specs.User{UID: 1000, GID: 1000}},
		Annotations: map[string]string{"io.kiln.console-log": "/var/log/x"},
	}
	b, _ := json.Marshal(&spec)
	os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644)
	stdout := filepath.Join(dir, "stdout")
	if err := unix.Mkfifo(stdout, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(stdout, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	g := &guestAPI{params: map[string]json.RawMessage{}}
	sock := filepath.Join(dir, "vm.sock")
	g.serve(t, sock)
	rpc, err := rpcDial(sock)
	if err != nil {
		t.Fatal(err)
	}
	pub := &topics{}
	ctx := namespaces.WithNamespace(context.Background(), "test")
	s := &service{ctx: ctx, publisher: pub, shutdown: func() {}, containers: map[string]*container{},
		vm: &vm{dir: dir, share: filepath.Join(dir, "share"), sock: sock, rpc: rpc}}
	os.MkdirAll(s.vm.share, 0o700)

	if _, err := s.Create(ctx, &taskAPI.CreateTaskRequest{ID: "c1", Bundle: bundle, Stdout: stdout}); err != nil {
		t.Fatal(err)
	}
	defer unmount(filepath.Join(s.vm.share, "c1"))
	var cp containerParams
	json.Unmarshal(g.got("container.create"), &cp)
	if cp.ID != "c1" || cp.Root != "/run/kiln-pod/c1" || cp.Hostname != "web" {
		t.Fatalf("container.create %s", g.got("container.create"))
	}
	var st1, st2 unix.Stat_t
	unix.Stat(filepath.Join(bundle, "rootfs", "bin"), &st1)
	unix.Stat(filepath.Join(s.vm.share, "c1", "bin"), &st2)
	if st1.Ino != st2.Ino || st1.Dev != st2.Dev {
		t.Fatal("the rootfs is not bound beneath the share")
	}

	res, err := s.Start(ctx, &taskAPI.StartRequest{ID: "c1"})
	if err != nil || res.Pid != 77 {
		t.Fatalf("start: %v %+v", err, res)
	}
	var sp processParams
	json.Unmarshal(g.got("spawn"), &sp)
	if sp.Container != "c1" || sp.UID != 1000 || strings.Join(sp.Argv, " ") != "sleep 600" ||
		sp.Stdin == nil || *sp.Stdin {
		t.Fatalf("spawn %s", g.got("spawn"))
	}
	buf := make([]byte, 16)
	out.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := out.Read(buf); string(buf[:n]) != "hello\n" {
		t.Fatalf("stdout FIFO: %q", buf[:n])
	}

	pids, err := s.Pids(ctx, &taskAPI.PidsRequest{ID: "c1"})
	if err != nil || len(pids.Processes) != 2 || pids.Processes[0].Pid != 77 {
		t.Fatalf("pids: %v %+v", err, pids)
	}
	stats, err := s.Stats(ctx, &taskAPI.StatsRequest{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := typeurl.UnmarshalAny(stats.Stats)
	if err != nil {
		t.Fatal(err)
	}
	if mm, ok := m.(*v2.Metrics); !ok || mm.CPU.UsageUsec != 7000 || mm.Pids.Current != 2 {
		t.Fatalf("stats %+v", m)
	}

	if _, err := s.Delete(ctx, &taskAPI.DeleteRequest{ID: "c1"}); err == nil {
		t.Fatal("a running task was deleted")
	}
	if _, err := s.Kill(ctx, &taskAPI.KillRequest{ID: "c1", Signal: uint32(syscall.SIGTERM)}); err != nil {
		t.Fatal(err)
	}
	w, err := s.Wait(ctx, &taskAPI.WaitRequest{ID: "c1"})
	if err != nil || w.ExitStatus != 143 {
		t.Fatalf("wait: %v %+v", err, w)
	}
	if _, err := s.Kill(ctx, &taskAPI.KillRequest{ID: "c1", Signal: 9}); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Fatalf("kill of an exited process: %v", err)
	}
	d, err := s.Delete(ctx, &taskAPI.DeleteRequest{ID: "c1"})
	if err != nil || d.ExitStatus != 143 || d.Pid != 77 {
		t.Fatalf("delete: %v %+v", err, d)
	}
	if string(g.got("container.delete")) != `{"id":"c1"}` {
		t.Fatalf("container.delete %s", g.got("container.delete"))
	}
	if _, err := os.Stat(filepath.Join(s.vm.share, "c1")); !os.IsNotExist(err) {
		t.Fatalf("the share's c1 is still there: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	pub.mu.Lock()
	seen := strings.Join(pub.seen, " ")
	pub.mu.Unlock()
	if seen != "/tasks/create /tasks/start /tasks/exit /tasks/delete" {
		t.Fatalf("events: %s", seen)
	}
	_, err = s.Update(ctx, &taskAPI.UpdateTaskRequest{ID: "c1"})
	if err == nil || !strings.Contains(err.Error(), "not supported by the Kiln runtime") {
		t.Fatalf("update: %v", err)
	}
}

func TestServiceCreateRefusesUnknownAnnotation(t *testing.T) {
	bundle := t.TempDir()
	spec := specs.Spec{Process: &specs.Process{Args: []string{"true"}},
		Annotations: map[string]string{"io.kiln.nope": "1"}}
	b, _ := json.Marshal(&spec)
	os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644)
	s := &service{ctx: context.Background(), publisher: &topics{}, containers: map[string]*container{}}
	_, err := s.Create(context.Background(), &taskAPI.CreateTaskRequest{ID: "c", Bundle: bundle})
	if err == nil || !strings.Contains(err.Error(), "annotation io.kiln.nope: unknown io.kiln.* key") ||
		!strings.Contains(err.Error(), "invalid argument") {
		t.Fatalf("got %v", err)
	}
	if s.vm != nil {
		t.Fatal("a VM was started for a refused container")
	}
}

// ResizePty: a terminal's size reaches the guest's pty as rows and
// columns; a client terminal with no size yet (0x0, ctr's under script(1))
// sends nothing, since the API refuses 0 and the pty keeps 24x80.
func TestServiceResizePty(t *testing.T) {
	dir := t.TempDir()
	g := &guestAPI{params: map[string]json.RawMessage{}}
	sock := filepath.Join(dir, "vm.sock")
	g.serve(t, sock)
	rpc, err := rpcDial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer rpc.close()
	s := &service{ctx: context.Background(), publisher: &topics{}, containers: map[string]*container{},
		vm: &vm{dir: dir, sock: sock, rpc: rpc}}
	c := &container{id: "c1", execs: map[string]*process{}}
	p := newProcess(c, "e3", &specs.Process{Args: []string{"sh"}, Terminal: true}, "", "", "", true)
	p.status, p.stream = task.StatusRunning, 5
	c.execs["e3"] = p
	s.containers["c1"] = c
	ctx := context.Background()

	if _, err := s.ResizePty(ctx, &taskAPI.ResizePtyRequest{ID: "c1", ExecID: "e3"}); err != nil {
		t.Fatal(err)
	}
	// a call answered after it shows that the 0x0 one sent nothing
	if err := rpc.call("container.list", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := g.got("pty.resize"); got != nil {
		t.Fatalf("0x0 sent pty.resize %s", got)
	}
	if _, err := s.ResizePty(ctx, &taskAPI.ResizePtyRequest{ID: "c1", ExecID: "e3", Width: 100, Height: 30}); err != nil {
		t.Fatal(err)
	}
	var r struct{ Stream, Rows, Cols int }
	json.Unmarshal(g.got("pty.resize"), &r)
	if r.Stream != 5 || r.Rows != 30 || r.Cols != 100 {
		t.Fatalf("pty.resize %s", g.got("pty.resize"))
	}
	if _, err := s.ResizePty(ctx, &taskAPI.ResizePtyRequest{ID: "c1", ExecID: "nope", Width: 1, Height: 1}); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Fatalf("resize of an unknown exec: %v", err)
	}
}

// CloseIO must not lose what the client wrote just before it asked:
// drainFifo returns once a reader has taken the FIFO's bytes, and no
// later than its bound when nobody reads.
func TestDrainFifo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdin")
	if err := unix.Mkfifo(path, 0600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("piped\nin\n")); err != nil {
		t.Fatal(err)
	}

	// nobody reads: bounded
	t0 := time.Now()
	drainFifo(path, 50*time.Millisecond)
	if time.Since(t0) < 50*time.Millisecond {
		t.Fatalf("drainFifo returned with 9 bytes unread")
	}

	// a slow reader: drainFifo waits for it
	var got atomic.Int32
	go func() {
		time.Sleep(100 * time.Millisecond)
		buf := make([]byte, 64)
		n, _ := r.Read(buf)
		got.Store(int32(n))
	}()
	drainFifo(path, 10*time.Second)
	if n := got.Load(); n != 9 {
		t.Fatalf("drainFifo returned before the reader took the bytes (it had %d)", n)
	}
}
