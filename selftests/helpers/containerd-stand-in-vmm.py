#!/usr/bin/python3
# selftests/helpers/containerd-stand-in-vmm.py - a stand-in for `vmm start
# --detach` on a host without KVM, for debugging containerd-shim-kiln-v2:
# serves the control API methods the shim uses (container.create, spawn,
# pty.open, spawn.write/closeStdin/kill, pty.resize, container.list/delete,
# vm.metrics, vm.shutdown) with chrooted host processes, no isolation and
# no network. Use: KILN_VMM=selftests/helpers/containerd-stand-in-vmm.py
# selftests/kvm/containerd.sh build (as root; the network, terminal and
# one kill case fail by design: no devpts in the chroot, no --net).
import sys, os, json, socket, subprocess, threading, base64, pty, signal, select, time, fcntl, termios, struct
a = sys.argv[1:]
def opt(n):
    return a[a.index(n)+1] if n in a else None
sock = opt('--control-socket'); pidf = opt('--pid-file')
share = [m for m in [a[i+1] for i,x in enumerate(a) if x=='--mount']][0].split('=bind:')[1].split(':')[0]
shim = os.getppid()
r, w = os.pipe()
if os.fork():
    os.close(w); os.read(r, 1); sys.exit(0)
os.setsid()
srv = socket.socket(socket.AF_UNIX); srv.bind(sock); srv.listen(8)
open(pidf, 'w').write(str(os.getpid()))
os.write(w, b'x')
null = os.open('/dev/null', os.O_RDWR); os.dup2(null, 0); os.dup2(null, 1)
os.dup2(os.open(os.environ.get('KILN_STAND_IN_LOG', '/dev/null'), os.O_WRONLY|os.O_CREAT|os.O_APPEND), 2)
containers = {}
def log(*x): print(*x, file=sys.stderr, flush=True)
def serve(c):
    lock = threading.Lock(); streams = {}; nxt = [0]
    def send(o):
        with lock: c.sendall((json.dumps(o)+'\n').encode())
    def reply(i, res): send({'jsonrpc':'2.0','id':i,'result':res})
    def pump(sid, fd, method, proc):
        while True:
            try: d = os.read(fd, 4096)
            except OSError: d = b''
            if not d: break
            send({'jsonrpc':'2.0','method':method,'params':{'stream':sid,'data':base64.b64encode(d).decode()}})
    def run(i, m, p):
        root = containers[p['container']]
        argv = p['argv']; env = p.get('env') or ['PATH=/bin']
        env = dict(e.split('=',1) for e in env)
        if m == 'pty.open':
            mfd, sfd = pty.openpty()
            proc = subprocess.Popen(argv, stdin=sfd, stdout=sfd, stderr=sfd, env=env, cwd='/', preexec_fn=lambda: (os.chroot(root), os.setsid(), fcntl.ioctl(0, termios.TIOCSCTTY, 0)))
            os.close(sfd); outs = [(mfd, 'stream.stdout')]; inp = mfd
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=lambda: (os.chroot(root), os.chdir('/'), os.setsid()))
            outs = [(proc.stdout.fileno(), 'stream.stdout'), (proc.stderr.fileno(), 'stream.stderr')]; inp = proc.stdin
            if p.get('stdin') is False: proc.stdin.close()
        nxt[0] += 1; sid = nxt[0]; streams[sid] = (proc, inp)
        reply(i, {'stream': sid, 'pid': proc.pid})
        ts = [threading.Thread(target=pump, args=(sid, fd, mm, proc)) for fd, mm in outs]
        for t in ts: t.start()
        rc = proc.wait()
        for t in ts: t.join()
        e = {'stream': sid, 'exitCode': rc if rc >= 0 else 128-rc, 'timedOut': False}
        if rc < 0: e['signal'] = -rc
        send({'jsonrpc':'2.0','method':'stream.exit','params':e})
    buf = b''
    while True:
        d = c.recv(65536)
        if not d: break
        buf += d
        while b'\n' in buf:
            line, buf = buf.split(b'\n', 1)
            q = json.loads(line); m = q['method']; p = q.get('params', {}); i = q.get('id')
            log('<', m, json.dumps(p)[:200])
            if m == 'container.create':
                containers[p['id']] = share + '/' + p['root'].split('/run/kiln-pod/')[1]; reply(i, {})
            elif m in ('spawn', 'pty.open'):
                threading.Thread(target=run, args=(i, m, p)).start()
            elif m == 'spawn.write':
                proc, inp = streams[p['stream']]
                data = base64.b64decode(p['data'])
                if isinstance(inp, int): os.write(inp, data)
                else: inp.write(data); inp.flush()
                if p.get('eof') and not isinstance(inp, int): inp.close()
                reply(i, {})
            elif m == 'spawn.closeStdin':
                proc, inp = streams[p['stream']]
                if not isinstance(inp, int): inp.close()
                reply(i, {})
            elif m == 'spawn.kill':
                proc, inp = streams[p['stream']]
                os.killpg(proc.pid, int(p['signal'])); reply(i, {})
            elif m == 'pty.resize':
                if p['rows'] < 1: send({'jsonrpc':'2.0','id':i,'error':{'code':-32602,'message':'rows'}})
                else: reply(i, {})
            elif m == 'container.list':
                reply(i, [{'id': k, 'pids': [pr.pid for pr, _ in streams.values() if pr.poll() is None]} for k in containers])
            elif m == 'container.delete':
                containers.pop(p['id'], None); reply(i, {})
            elif m == 'vm.metrics':
                reply(i, {'vcpus':[{'id':0,'cpuNs':1000}],'devices':[],'process':{'rssBytes':1,'anonBytes':1}})
            elif m == 'vm.shutdown':
                reply(i, {}); os.unlink(sock); os._exit(0)
            elif m == 'exec':
                reply(i, {'exitCode':0})
            else:
                send({'jsonrpc':'2.0','id':i,'error':{'code':-32601,'message':'no '+m}})
def watch():
    while True:
        time.sleep(0.2)
        if not os.path.exists('/proc/%d' % shim):
            try: os.unlink(sock)
            except: pass
            os._exit(0)
threading.Thread(target=watch, daemon=True).start()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,)).start()
