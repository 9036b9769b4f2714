// The vmm's control API (Documentation/api.md): JSON-RPC 2.0, one JSON
// text a line, over the VM's Unix socket. One connection per shim: the
// streams of spawn and pty.open belong to it, and the API kills their
// process groups when it closes, which is what should happen when the
// shim goes.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *rpcError) Error() string {
	return fmt.Sprintf("vmm: %s (%d)", e.Message, e.Code)
}

// The API's "the guest refused" and its errno name.
const rpcGuestRefused = -32000

func (e *rpcError) errno() string {
	var d struct {
		Errno string `json:"errno"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Errno
}

type rpcMsg struct {
	ID     *uint64         `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

// streamHandler gets a stream's notifications: stdout/stderr data, then
// its exit, last.
type streamHandler interface {
	output(method string, data []byte)
	exited(e *streamExit)
}

type rpcClient struct {
	conn    net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	calls   map[uint64]chan *rpcMsg
	streams map[int]streamHandler
	// notifications of a stream whose spawn answer has not been seen yet
	early  map[int][]*rpcMsg
	closed bool
	done   chan struct{}
}

var errVMGone = errors.New("the VM's control socket closed")

func rpcDial(path string) (*rpcClient, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	c := &rpcClient{conn: conn, calls: map[uint64]chan *rpcMsg{},
		streams: map[int]streamHandler{}, early: map[int][]*rpcMsg{},
		done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *rpcClient) read() {
	sc := bufio.NewScanner(c.conn)
	sc.Buffer(make([]byte, 64*1024), 32*1024*1024)
	for sc.Scan() {
		var m rpcMsg
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.ID != nil {
			c.mu.Lock()
			ch := c.calls[*m.ID]
			delete(c.calls, *m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- &m
			}
			continue
		}
		c.notify(&m)
	}
	c.mu.Lock()
	c.closed = true
	calls := c.calls
	c.calls = map[uint64]chan *rpcMsg{}
	streams := c.streams
	c.streams = map[int]streamHandler{}
	c.mu.Unlock()
	for _, ch := range calls {
		close(ch)
	}
	// every process whose stream was open went with the VM
	for _, h := range streams {
		h.exited(&streamExit{})
	}
	close(c.done)
}

func (c *rpcClient) notify(m *rpcMsg) {
	var p struct {
		Stream int    `json:"stream"`
		Data   []byte `json:"data"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return
	}
	c.mu.Lock()
	h := c.streams[p.Stream]
	if h == nil {
		if m.Method == "stream.stdout" || m.Method == "stream.stderr" ||
			m.Method == "stream.exit" {
			c.early[p.Stream] = append(c.early[p.Stream], m)
		}
		c.mu.Unlock()
		return
	}
	if m.Method == "stream.exit" {
		delete(c.streams, p.Stream)
	}
	c.mu.Unlock()
	deliver(h, m, p.Data)
}

func deliver(h streamHandler, m *rpcMsg, data []byte) {
	switch m.Method {
	case "stream.stdout", "stream.stderr":
		h.output(m.Method, data)
	case "stream.exit":
		var e streamExit
		_ = json.Unmarshal(m.Params, &e)
		h.exited(&e)
	}
}

// attach routes stream s to h, first handing it what came early.
func (c *rpcClient) attach(s int, h streamHandler) {
	c.mu.Lock()
	early := c.early[s]
	delete(c.early, s)
	ended := false
	for _, m := range early {
		if m.Method == "stream.exit" {
			ended = true
		}
	}
	if !ended {
		c.streams[s] = h
	}
	c.mu.Unlock()
	for _, m := range early {
		var p struct {
			Data []byte `json:"data"`
		}
		_ = json.Unmarshal(m.Params, &p)
		deliver(h, m, p.Data)
	}
}

// A request the VM has not answered in this long has failed: the task
// API's caller gets an error naming it rather than a hang. A stream's
// input waits for the guest to read it (the API's backpressure), so
// spawn.write has no bound.
const rpcTimeout = 60 * time.Second

func callTimeout(method string) time.Duration {
	if method == "spawn.write" {
		return 1<<63 - 1
	}
	return rpcTimeout
}

// call sends one request and waits for its answer; result (if not nil)
// gets the result.
func (c *rpcClient) call(method string, params interface{}, result interface{}) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errVMGone
	}
	c.next++
	id := c.next
	ch := make(chan *rpcMsg, 1)
	c.calls[id] = ch
	c.mu.Unlock()

	req := map[string]interface{}{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	_, err = c.conn.Write(append(line, '\n'))
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	var m *rpcMsg
	var ok bool
	select {
	case m, ok = <-ch:
	case <-time.After(callTimeout(method)):
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		return fmt.Errorf("%s: no answer from the VM within %v", method, callTimeout(method))
	}
	if !ok {
		return errVMGone
	}
	if m.Error != nil {
		return m.Error
	}
	if result != nil {
		return json.Unmarshal(m.Result, result)
	}
	return nil
}

func (c *rpcClient) close() {
	c.conn.Close()
}
