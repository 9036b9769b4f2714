package main

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

type recorder struct {
	mu   sync.Mutex
	out  []string
	exit chan *streamExit
}

func (r *recorder) output(method string, data []byte) {
	r.mu.Lock()
	r.out = append(r.out, method+":"+string(data))
	r.mu.Unlock()
}

func (r *recorder) exited(e *streamExit) { r.exit <- e }

// fakeAPI answers spawn with stream 7 and, before the answer reaches the
// client's attach, already sends the stream's output and exit; then
// closes on vm.shutdown.
func fakeAPI(t *testing.T, l net.Listener) {
	conn, err := l.Accept()
	if err != nil {
		t.Error(err)
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
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			t.Error(err)
			return
		}
		switch req.Method {
		case "spawn":
			conn.Write([]byte(`{"jsonrpc":"2.0","id":` + jsonNum(req.ID) + `,"result":{"stream":7,"pid":41}}` + "\n" +
				`{"jsonrpc":"2.0","method":"stream.stdout","params":{"stream":7,"data":"aGkK"}}` + "\n" +
				`{"jsonrpc":"2.0","method":"stream.exit","params":{"stream":7,"exitCode":143,"signal":15,"timedOut":false}}` + "\n"))
		case "spawn.kill":
			conn.Write([]byte(`{"jsonrpc":"2.0","id":` + jsonNum(req.ID) + `,"error":{"code":-32000,"message":"no such process","data":{"errno":"ESRCH","errnoValue":3}}}` + "\n"))
		case "spawn2":
			conn.Write([]byte(`{"jsonrpc":"2.0","id":` + jsonNum(req.ID) + `,"result":{"stream":8,"pid":42}}` + "\n"))
		case "vm.shutdown":
			return
		}
	}
}

func jsonNum(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestRPCStreamsAndErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go fakeAPI(t, l)
	c, err := rpcDial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()

	var res struct {
		Stream int `json:"stream"`
		Pid    int `json:"pid"`
	}
	if err := c.call("spawn", map[string]interface{}{"argv": []string{"x"}}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Stream != 7 || res.Pid != 41 {
		t.Fatalf("result %+v", res)
	}
	// let the notifications arrive before the stream is attached
	time.Sleep(50 * time.Millisecond)
	r := &recorder{exit: make(chan *streamExit, 1)}
	c.attach(res.Stream, r)
	e := <-r.exit
	if exitStatus(e) != 143 || len(r.out) != 1 || r.out[0] != "stream.stdout:hi\n" {
		t.Fatalf("early notifications: out %q exit %d", r.out, exitStatus(e))
	}

	err = c.call("spawn.kill", map[string]interface{}{"stream": 7}, nil)
	re, ok := err.(*rpcError)
	if !ok || re.Code != rpcGuestRefused || re.errno() != "ESRCH" {
		t.Fatalf("want the guest's ESRCH, got %v", err)
	}

	// a stream open when the VM goes ends as killed with it
	if err := c.call("spawn2", nil, &res); err != nil {
		t.Fatal(err)
	}
	r2 := &recorder{exit: make(chan *streamExit, 1)}
	c.attach(res.Stream, r2)
	_ = c.call("vm.shutdown", nil, nil)
	select {
	case e := <-r2.exit:
		if exitStatus(e) != exitLost {
			t.Fatalf("lost stream: status %d", exitStatus(e))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the open stream did not end when the socket closed")
	}
	if err := c.call("vm.metrics", nil, nil); err != errVMGone {
		t.Fatalf("after the close: %v", err)
	}
}

func unixListen(path string) (net.Listener, error) { return net.Listen("unix", path) }
