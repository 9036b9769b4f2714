// The FUSE messages a virtual mount's server reads and writes
// (Documentation/virtual-fs.md: the guest's requests byte for byte,
// <linux/fuse.h> protocol 7, little endian), and their framing on a
// SOCK_STREAM socket: messages back to back, each framed by its header's
// len. Only what the SDK's server answers is decoded; every length,
// count and name is checked against the message (the guest may be
// hostile).

/** struct fuse_in_header. */
export const IN_HEADER = 40;
/** struct fuse_out_header. */
export const OUT_HEADER = 16;
/** FS_FORWARD_MAX: no message on the socket is longer (1 MiB + 4 KiB). */
export const MAX_MESSAGE = 1024 * 1024 + 4096;
/** The largest read and write we negotiate (max_write; no
 * FUSE_MAX_PAGES, so the guest reads at most 32 pages too). */
export const MAX_WRITE = 128 * 1024;
/** Longest name component (NAME_MAX). */
export const NAME_MAX = 255;

export const Op = {
	LOOKUP: 1, FORGET: 2, GETATTR: 3, SETATTR: 4, READLINK: 5, SYMLINK: 6, MKNOD: 8, MKDIR: 9,
	UNLINK: 10, RMDIR: 11, RENAME: 12, LINK: 13, OPEN: 14, READ: 15, WRITE: 16, STATFS: 17,
	RELEASE: 18, FSYNC: 20, SETXATTR: 21, GETXATTR: 22, LISTXATTR: 23, REMOVEXATTR: 24, FLUSH: 25,
	INIT: 26, OPENDIR: 27, READDIR: 28, RELEASEDIR: 29, FSYNCDIR: 30, ACCESS: 34, CREATE: 35,
	INTERRUPT: 36, DESTROY: 38, BATCH_FORGET: 42, FALLOCATE: 43, READDIRPLUS: 44, RENAME2: 45,
	LSEEK: 46,
} as const;

/** Opcodes that get no reply. */
export const NO_REPLY: ReadonlySet<number> = new Set([Op.FORGET, Op.BATCH_FORGET, Op.INTERRUPT]);

/** Linux errno numbers (asm-generic/errno-base.h, errno.h). */
export const Errno = Object.freeze({
	EPERM: 1, ENOENT: 2, EIO: 5, EBADF: 9, EAGAIN: 11, ENOMEM: 12, EACCES: 13, EFAULT: 14, EBUSY: 16,
	EEXIST: 17, EXDEV: 18, ENOTDIR: 20, EISDIR: 21, EINVAL: 22, ENFILE: 23, EMFILE: 24, EFBIG: 27,
	ENOSPC: 28, EROFS: 30, EMLINK: 31, ERANGE: 34, ENAMETOOLONG: 36, ENOSYS: 38, ENOTEMPTY: 39,
	ELOOP: 40, ENODATA: 61, EPROTO: 71, EOVERFLOW: 75, EILSEQ: 84, EOPNOTSUPP: 95, ESTALE: 116,
} as const);

/** The errno of an error code name ("ENOENT"), or undefined. */
export function errnoOf(code: unknown): number | undefined {
	return typeof code === "string" && Object.hasOwn(Errno, code) ? (Errno as Record<string, number>)[code] : undefined;
}

/** A request, its header decoded. */
export interface FuseRequest {
	readonly len: number;
	readonly opcode: number;
	readonly unique: bigint;
	readonly nodeid: bigint;
	readonly uid: number;
	readonly gid: number;
	readonly pid: number;
	/** The arguments after the header (a view into the message). */
	readonly body: Buffer;
}

/** A malformed request: answered with errno (or dropped, for a request
 * whose header itself is unusable). */
export class FuseError extends Error {
	readonly errno: number;

	constructor(errno: number, why: string) {
		super(why);
		this.errno = errno;
	}
}

export function decodeHeader(msg: Buffer): FuseRequest {
	if (msg.length < IN_HEADER)
		throw new FuseError(Errno.EINVAL, `a request of ${msg.length} bytes, shorter than its header`);
	const len = msg.readUInt32LE(0);
	if (len !== msg.length)
		throw new FuseError(Errno.EINVAL, `len ${len} is not the message's ${msg.length} bytes`);
	return {
		len,
		opcode: msg.readUInt32LE(4),
		unique: msg.readBigUInt64LE(8),
		nodeid: msg.readBigUInt64LE(16),
		uid: msg.readUInt32LE(24),
		gid: msg.readUInt32LE(28),
		pid: msg.readUInt32LE(32),
		body: msg.subarray(IN_HEADER),
	};
}

/** A reply: the header, then the payload (an error reply has none). */
export function encodeReply(unique: bigint, error: number, payload?: Buffer): Buffer {
	const body = error === 0 && payload ? payload : Buffer.alloc(0);
	const out = Buffer.alloc(OUT_HEADER + body.length);
	out.writeUInt32LE(out.length, 0);
	out.writeInt32LE(error, 4);
	out.writeBigUInt64LE(unique, 8);
	body.copy(out, OUT_HEADER);
	return out;
}

/** The body is at least n bytes, or EINVAL. */
export function need(body: Buffer, n: number, what: string): void {
	if (body.length < n)
		throw new FuseError(Errno.EINVAL, `${what}: ${body.length} bytes of arguments, ${n} needed`);
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** A NUL-terminated name at offset: [name, offset after its NUL]. A
 * name must be one path component of valid UTF-8. */
export function cstring(body: Buffer, offset: number): [string, number] {
	const end = body.indexOf(0, offset);
	if (end < 0 || offset > body.length)
		throw new FuseError(Errno.EINVAL, "a name without its NUL");
	if (end - offset > NAME_MAX)
		throw new FuseError(Errno.ENAMETOOLONG, "a name over 255 bytes");
	let name: string;
	try {
		name = utf8.decode(body.subarray(offset, end));
	} catch {
		throw new FuseError(Errno.EILSEQ, "a name that is not UTF-8");
	}
	if (name === "" || name === "." || name === ".." || name.includes("/"))
		throw new FuseError(Errno.EINVAL, `a bad name ${JSON.stringify(name)}`);
	return [name, end + 1];
}

/**
 * Messages out of a byte stream, framed by len. Holds at most one
 * message being assembled (MAX_MESSAGE) plus the chunk that completes
 * it; a len below the header or past MAX_MESSAGE cannot be framed any
 * more: push() throws and the connection must be dropped.
 */
export class FuseFramer {
	#chunks: Buffer[] = [];
	#have = 0;

	/** Bytes held now. */
	get buffered(): number {
		return this.#have;
	}

	push(chunk: Buffer): Buffer[] {
		this.#chunks.push(chunk);
		this.#have += chunk.length;
		const out: Buffer[] = [];
		for (;;) {
			if (this.#have < 4)
				break;
			const head = this.#peek(4);
			const len = head.readUInt32LE(0);
			if (len < IN_HEADER || len > MAX_MESSAGE)
				throw new FuseError(Errno.EPROTO, `a message of len ${len}: not ${IN_HEADER} to ${MAX_MESSAGE} bytes, the stream cannot be framed`);
			if (this.#have < len)
				break;
			out.push(this.#take(len));
		}
		return out;
	}

	#peek(n: number): Buffer {
		const first = this.#chunks[0];
		if (first && first.length >= n)
			return first;
		const all = Buffer.concat(this.#chunks);
		this.#chunks = [all];
		return all;
	}

	#take(n: number): Buffer {
		const all = this.#chunks.length === 1 ? this.#chunks[0] ?? Buffer.alloc(0) : Buffer.concat(this.#chunks);
		// A copy: the message outlives the chunk it came in.
		const msg = Buffer.from(all.subarray(0, n));
		const rest = all.subarray(n);
		this.#chunks = rest.length > 0 ? [rest] : [];
		this.#have = rest.length;
		return msg;
	}
}
