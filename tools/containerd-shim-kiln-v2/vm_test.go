package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startInNetns: the process starts in the pod's network namespace, and
// the shim's own threads stay where they were.
func TestStartInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace of the test's own")
	}
	// a network namespace held by a process of the test's
	holder := exec.Command("unshare", "--net", "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Skipf("unshare --net: %v", err)
	}
	defer func() {
		holder.Process.Kill()
		holder.Wait()
	}()
	path := "/proc/" + strconv.Itoa(holder.Process.Pid) + "/ns/net"
	var want string
	for i := 0; i < 100; i++ {
		own, _ := os.Readlink("/proc/self/ns/net")
		if want, _ = os.Readlink(path); want != "" && want != own {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	own, _ := os.Readlink("/proc/self/ns/net")
	if want == "" || want == own {
		t.Fatalf("the holder's namespace %q (own %q)", want, own)
	}

	var out bytes.Buffer
	cmd := exec.Command("readlink", "/proc/self/ns/net")
	cmd.Stdout = &out
	if err := startInNetns(path, cmd.Start); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got := strings.TrimSpace(out.String()); got != want {
		t.Fatalf("the process's namespace: %q, want %q", got, want)
	}
	// every thread of the shim still in its own
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		if ns, _ := os.Readlink("/proc/self/task/" + e.Name() + "/ns/net"); ns != own && ns != "" {
			t.Fatalf("thread %s is in %s", e.Name(), ns)
		}
	}

	if err := startInNetns("/proc/self/ns/ipc", exec.Command("true").Start); err == nil ||
		!strings.Contains(err.Error(), "not a network namespace") {
		t.Fatalf("an IPC namespace: %v", err)
	}
	if err := startInNetns("/run/netns/kiln-no-such", exec.Command("true").Start); err == nil ||
		!strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a missing namespace: %v", err)
	}
}
