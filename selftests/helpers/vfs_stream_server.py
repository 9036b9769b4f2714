#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A virtual-fs server on a SOCK_STREAM socket, in Python's standard library.

    vfs_stream_server.py SOCKET_PATH ROOT_DIR

Serves the host directory ROOT_DIR to a `virtual:` mount, speaking the
protocol of Documentation/virtual-fs.md over a stream: every message is a
FUSE message framed by its header's `len`, back to back. The guest can
read, write, create, list and remove files and directories in it.

It is built to be killed and started again under a running VM:

- node ids are the host files' inode numbers (+1; the root is 1), and the
  id -> path table is rebuilt from ROOT_DIR at start, so the ids the guest
  still holds keep working;
- file handles are not kept (every READ and WRITE opens the path), so the
  handles the guest still holds keep working;
- a new connection first gets the guest's FUSE_INIT again (unique 0),
  answered like any other.

Entry and attribute timeouts are 0: the guest asks for every lookup,
which is what lets a test see the server gone. It is a test helper (and
the model of the TypeScript SDK's server), not a hardened file server.
"""
import asyncio
import errno
import os
import socket
import stat
import struct
import sys

# ---- the wire: Documentation/virtual-fs.md, <linux/fuse.h> ----------------

IN_HEADER = struct.Struct("<IIQQIIIHH")  # len opcode unique nodeid uid gid pid
OUT_HEADER = struct.Struct("<IiQ")  # len error unique
MAX_MESSAGE = 1052672  # FS_FORWARD_MAX: no message is longer
ROOT_ID = 1

LOOKUP, FORGET, GETATTR, SETATTR, READLINK = 1, 2, 3, 4, 5
MKDIR, UNLINK, RMDIR, RENAME, OPEN, READ, WRITE = 9, 10, 11, 12, 14, 15, 16
STATFS, RELEASE, FSYNC, FLUSH, INIT = 17, 18, 20, 25, 26
OPENDIR, READDIR, RELEASEDIR, FSYNCDIR = 27, 28, 29, 30
CREATE, INTERRUPT, DESTROY, BATCH_FORGET, RENAME2 = 35, 36, 38, 42, 45
NO_REPLY = (FORGET, BATCH_FORGET, INTERRUPT)

ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # struct fuse_attr, 88 bytes
ENTRY_OUT = struct.Struct("<QQQQII")  # + ATTR: struct fuse_entry_out
ATTR_OUT = struct.Struct("<QII")  # + ATTR: struct fuse_attr_out
OPEN_OUT = struct.Struct("<QII")
INIT_IN = struct.Struct("<IIII")
INIT_OUT = struct.Struct("<IIIIHHIIHHI28x")  # 64 bytes
READ_IN = struct.Struct("<QQIIQII")  # also fuse_write_in: 40 bytes
SETATTR_IN = struct.Struct("<IIQQQQQQIIIIIIII")
CREATE_IN = struct.Struct("<IIII")
MKDIR_IN = struct.Struct("<II")
DIRENT = struct.Struct("<QQII")
KSTATFS = struct.Struct("<QQQQQIII28x")

FATTR_MODE, FATTR_SIZE, FATTR_ATIME, FATTR_MTIME = 1, 8, 16, 32
FATTR_ATIME_NOW, FATTR_MTIME_NOW = 128, 256
FUSE_BIG_WRITES = 1 << 5
MAX_WRITE = 128 * 1024


class FuseError(Exception):
    def __init__(self, err):
        super().__init__(os.strerror(err))
        self.errno = err


def cstring(body, offset=0):
    """A NUL-terminated name at offset: (name, offset after the NUL)."""
    end = body.find(b"\0", offset)
    if end < 0:
        raise FuseError(errno.EINVAL)
    name = body[offset:end].decode("utf-8", "surrogateescape")
    if not name or name in (".", "..") or "/" in name:
        raise FuseError(errno.EINVAL)
    return name, end + 1


class Tree:
    """ROOT_DIR as FUSE nodes: node id = st_ino + 1, the root is 1."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.paths = {ROOT_ID: self.root}
        for top, dirs, files in os.walk(self.root):
            for name in dirs + files:
                self.node_of(os.path.join(top, name))

    def node_of(self, path):
        node = os.lstat(path).st_ino + 1
        self.paths[node] = path
        return node

    def path(self, node):
        if node not in self.paths:
            raise FuseError(errno.ESTALE)
        return self.paths[node]

    def child(self, node, name):
        return os.path.join(self.path(node), name)

    def attr(self, node):
        st = os.lstat(self.path(node))
        return ATTR.pack(node, st.st_size, st.st_blocks,
                         int(st.st_atime), int(st.st_mtime), int(st.st_ctime),
                         st.st_atime_ns % 10**9, st.st_mtime_ns % 10**9,
                         st.st_ctime_ns % 10**9, st.st_mode, st.st_nlink,
                         st.st_uid, st.st_gid, st.st_rdev, 4096, 0)

    def entry(self, path):
        node = self.node_of(path)
        return ENTRY_OUT.pack(node, 0, 0, 0, 0, 0) + self.attr(node)


# ---- the operations: (nodeid, body) -> reply payload, or FuseError --------

def do_init(tree, node, body):
    major, minor, readahead, flags = INIT_IN.unpack_from(body)
    if major != 7:
        raise FuseError(errno.EPROTO)
    return INIT_OUT.pack(7, min(minor, 31), readahead,
                         flags & FUSE_BIG_WRITES, 16, 12, MAX_WRITE, 1,
                         0, 0, 0)


def do_lookup(tree, node, body):
    return tree.entry(tree.child(node, cstring(body)[0]))


def do_getattr(tree, node, body):
    return ATTR_OUT.pack(0, 0, 0) + tree.attr(node)


def do_setattr(tree, node, body):
    (valid, _, _, size, _, atime, mtime, _, atimens, mtimens, _, mode,
     *_rest) = SETATTR_IN.unpack_from(body)
    path = tree.path(node)
    if valid & FATTR_MODE:
        os.chmod(path, stat.S_IMODE(mode))
    if valid & FATTR_SIZE:
        os.truncate(path, size)
    if valid & (FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW |
                FATTR_MTIME_NOW):
        os.utime(path)  # "now" for both: enough for touch
    return do_getattr(tree, node, body)


def do_readlink(tree, node, body):
    return os.fsencode(os.readlink(tree.path(node)))


def do_open(tree, node, body):
    return OPEN_OUT.pack(0, 0, 0)  # no handle kept: fh 0


def do_read(tree, node, body):
    _, offset, size, *_ = READ_IN.unpack_from(body)
    fd = os.open(tree.path(node), os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return os.pread(fd, min(size, MAX_WRITE), offset)
    finally:
        os.close(fd)


def do_write(tree, node, body):
    _, offset, size, *_ = READ_IN.unpack_from(body)
    data = body[READ_IN.size:READ_IN.size + size]
    fd = os.open(tree.path(node), os.O_WRONLY | os.O_NOFOLLOW)
    try:
        return struct.pack("<II", os.pwrite(fd, data, offset), 0)
    finally:
        os.close(fd)


def do_create(tree, node, body):
    flags, mode, umask, _ = CREATE_IN.unpack_from(body)
    path = tree.child(node, cstring(body, CREATE_IN.size)[0])
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW |
                 (flags & os.O_EXCL), stat.S_IMODE(mode) & ~umask)
    os.close(fd)
    return tree.entry(path) + OPEN_OUT.pack(0, 0, 0)


def do_mkdir(tree, node, body):
    mode, umask = MKDIR_IN.unpack_from(body)
    path = tree.child(node, cstring(body, MKDIR_IN.size)[0])
    os.mkdir(path, stat.S_IMODE(mode) & ~umask)
    return tree.entry(path)


def do_unlink(tree, node, body):
    os.unlink(tree.child(node, cstring(body)[0]))
    return b""


def do_rmdir(tree, node, body):
    os.rmdir(tree.child(node, cstring(body)[0]))
    return b""


def do_rename(tree, node, body, head=8):
    (newdir,) = struct.unpack_from("<Q", body)
    old, offset = cstring(body, head)
    new, _ = cstring(body, offset)
    os.rename(tree.child(node, old), tree.child(newdir, new))
    tree.node_of(tree.child(newdir, new))
    return b""


def do_readdir(tree, node, body):
    _, offset, size, *_ = READ_IN.unpack_from(body)
    names = sorted(os.listdir(tree.path(node)))
    out = b""
    for i, name in enumerate(names[offset:], start=offset + 1):
        st = os.lstat(os.path.join(tree.path(node), name))
        raw = os.fsencode(name)
        entry = DIRENT.pack(st.st_ino + 1, i, len(raw),
                            stat.S_IFMT(st.st_mode) >> 12) + raw
        entry += b"\0" * (-len(entry) % 8)
        if len(out) + len(entry) > size:
            break
        out += entry
    return out


def do_statfs(tree, node, body):
    st = os.statvfs(tree.root)
    return KSTATFS.pack(st.f_blocks, st.f_bfree, st.f_bavail, st.f_files,
                        st.f_ffree, st.f_bsize, st.f_namemax, st.f_frsize)


def do_nothing(tree, node, body):
    tree.path(node)  # the node must exist
    return b""


OPERATIONS = {
    INIT: do_init, LOOKUP: do_lookup, GETATTR: do_getattr,
    SETATTR: do_setattr, READLINK: do_readlink, OPEN: do_open,
    OPENDIR: do_open, READ: do_read, WRITE: do_write, CREATE: do_create,
    MKDIR: do_mkdir, UNLINK: do_unlink, RMDIR: do_rmdir, RENAME: do_rename,
    RENAME2: lambda t, n, b: do_rename(t, n, b, head=16),
    READDIR: do_readdir, STATFS: do_statfs, RELEASE: do_nothing,
    RELEASEDIR: do_nothing, FLUSH: do_nothing, FSYNC: do_nothing,
    FSYNCDIR: do_nothing, DESTROY: do_nothing,
}


def handle(tree, opcode, nodeid, body):
    """One request: (error, payload); error is 0 or a negative errno."""
    operation = OPERATIONS.get(opcode)
    if operation is None:
        return -errno.ENOSYS, b""
    try:
        return 0, operation(tree, nodeid, body)
    except FuseError as e:
        return -e.errno, b""
    except OSError as e:
        return -(e.errno or errno.EIO), b""
    except struct.error:  # arguments shorter than their struct
        return -errno.EINVAL, b""


# ---- the stream: one message after another, framed by len ----------------

async def serve(tree, reader, writer):
    try:
        while True:
            head = await reader.readexactly(IN_HEADER.size)
            length, opcode, unique, nodeid = IN_HEADER.unpack(head)[:4]
            if length < IN_HEADER.size or length > MAX_MESSAGE:
                print(f"vfs_stream_server: request len {length}: closing",
                      file=sys.stderr)
                break  # the stream cannot be framed any more
            body = await reader.readexactly(length - IN_HEADER.size)
            if opcode in NO_REPLY:
                continue
            error, payload = handle(tree, opcode, nodeid, body)
            if error:
                payload = b""  # an error reply is the header alone
            writer.write(OUT_HEADER.pack(OUT_HEADER.size + len(payload),
                                         error, unique) + payload)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the vmm closed the connection
    finally:
        writer.close()


async def main(path, root):
    tree = Tree(root)
    # Bound under a temporary name, then renamed: the path appears only
    # once something listens on it.
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path + "~"):
        os.unlink(path + "~")
    sock.bind(path + "~")
    sock.listen(8)
    os.rename(path + "~", path)
    server = await asyncio.start_unix_server(
        lambda r, w: serve(tree, r, w), sock=sock, limit=MAX_MESSAGE)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: vfs_stream_server.py SOCKET_PATH ROOT_DIR")
    asyncio.run(main(sys.argv[1], sys.argv[2]))
