// The pod's VM: one `vmm start` per shim, and the host directory it
// shares into the guest.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/sys/reaper"
	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

// The VMs' state lives under this root, one short directory per pod (the
// control socket's path is limited to 95 bytes: a bundle path is not).
const (
	stateRoot = "/run/kiln-containerd"
	// the bundle file naming the pod's state directory, for `delete`
	bundleVMFile = "kiln-vm"
	// How long a shut-down VM gets to power off before the shim kills its
	// vmm: containerd gives Shutdown 3 s (io.containerd.timeout.shim.shutdown),
	// and the VM's disk is ephemeral, so a forced stop loses nothing.
	vmStopWait = 2 * time.Second
)

type vm struct {
	dir     string
	share   string
	sock    string
	pidFile string
	pid     int
	rpc     *rpcClient
}

func vmDirFor(namespace, group string) string {
	h := sha256.Sum256([]byte(namespace + "/" + group))
	return filepath.Join(stateRoot, hex.EncodeToString(h[:8]))
}

// vmmPath: $KILN_VMM, else the vmm beside this shim, else the PATH's.
func vmmPath() string {
	if p := os.Getenv("KILN_VMM"); p != "" {
		return p
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "vmm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "vmm"
}

// vmStart boots the VM and connects to its control API. The vmm is this
// shim's child with --die-with-parent: whatever way the shim ends, the VM
// follows within seconds.
func vmStart(dir string, c *vmConfig) (*vm, error) {
	v := &vm{dir: dir, share: filepath.Join(dir, "share"),
		sock: filepath.Join(dir, "vm.sock"), pidFile: filepath.Join(dir, "vmm.pid")}
	if err := os.MkdirAll(v.share, 0o700); err != nil {
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	policy := filepath.Join(dir, "policy.json")
	if c.NetPolicy != nil {
		if err := os.WriteFile(policy, c.NetPolicy, 0o600); err != nil {
			return nil, fmt.Errorf("policy file %s: %w", policy, err)
		}
	}
	// A file, not a pipe: the VM process `vmm start --detach` leaves
	// behind must not hold up the wait for the pipe's end.
	logPath := filepath.Join(dir, "vmm-start.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", logPath, err)
	}
	defer log.Close()
	cmd := exec.Command(vmmPath(), vmmArgs(c, v.share, v.sock, v.pidFile, policy)...)
	cmd.Stderr = log
	cmd.Stdout = log
	// The shim library reaps every child (it is a subreaper: the VM
	// process `vmm start --detach` leaves becomes its child too), so the
	// status comes from its reaper, not from cmd.Wait.
	var ec chan runc.Exit
	err = startInNetns(c.Netns, func() (err error) {
		ec, err = reaper.Default.Start(cmd)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("vmm start: %w", err)
	}
	status, err := reaper.Default.Wait(cmd, ec)
	if err != nil || status != 0 {
		msg, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("vmm start: exit status %d: %s", status, strings.TrimSpace(string(msg)))
	}
	b, err := os.ReadFile(v.pidFile)
	if err != nil {
		return nil, fmt.Errorf("vmm pid file: %w", err)
	}
	v.pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("vmm pid file %s: %q", v.pidFile, b)
	}
	v.rpc, err = rpcDial(v.sock)
	if err != nil {
		unix.Kill(v.pid, unix.SIGKILL)
		return nil, fmt.Errorf("control socket %s: %w", v.sock, err)
	}
	return v, nil
}

// startInNetns runs start, which starts a process, on a thread of its own
// that first joins the network namespace at path (none: as it is): the
// process is forked from that thread, so it starts in the namespace. The
// thread goes back to the shim's namespace before it is given back to
// the Go runtime; if it cannot, it ends with its goroutine (locked), so
// no other goroutine ever runs in the pod's namespace.
func startInNetns(path string, start func() error) error {
	if path == "" {
		return start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("the shim's network namespace: %w", err)
			return
		}
		defer own.Close()
		f, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("the pod's network namespace: %w", err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			if err == unix.EINVAL {
				errc <- fmt.Errorf("the pod's network namespace %s: not a network namespace", path)
			} else {
				errc <- fmt.Errorf("the pod's network namespace %s: setns: %w", path, err)
			}
			return
		}
		err = start()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

func pidAlive(pid int) bool {
	return pid > 0 && unix.Kill(pid, 0) == nil
}

// isVMM: pid is the vmm serving sock (the pid file may be stale and the
// pid reused).
func isVMM(pid int, sock string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, a := range bytes.Split(b, []byte{0}) {
		if string(a) == sock {
			return true
		}
	}
	return false
}

// stop asks the guest to power off, and kills the vmm if it has not gone
// within vmStopWait.
func (v *vm) stop() {
	if v.rpc != nil {
		_ = v.rpc.call("vm.shutdown", nil, nil)
	}
	deadline := time.Now().Add(vmStopWait)
	for pidAlive(v.pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if pidAlive(v.pid) && isVMM(v.pid, v.sock) {
		unix.Kill(v.pid, unix.SIGKILL)
	}
	if v.rpc != nil {
		v.rpc.close()
	}
	cleanupDir(v.dir)
}

// cleanupDir detaches whatever is still mounted beneath the pod's share
// and removes the state directory.
func cleanupDir(dir string) {
	share := filepath.Join(dir, "share")
	if ents, err := os.ReadDir(share); err == nil {
		for _, e := range ents {
			unmount(filepath.Join(share, e.Name()))
		}
	}
	_ = os.RemoveAll(dir)
}

func unmount(path string) {
	for i := 0; i < 8; i++ {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			break
		}
	}
	_ = os.Remove(path)
}

// bindInto binds host path src at dst (made as a file or a directory
// like src), recursively, so that the virtio-fs share serves it.
func bindInto(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if st.IsDir() {
		err = os.Mkdir(dst, 0o755)
	} else {
		var f *os.File
		f, err = os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
		}
	}
	if err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		os.Remove(dst)
		return fmt.Errorf("bind %s at %s: %w", src, dst, err)
	}
	return nil
}
