// FUSE requests as the guest kernel's virtio_fs driver sends them
// (<linux/fuse.h>, protocol 7.31+, little endian), for the tests: each
// builder lays out the in-header and the opcode's arguments byte for
// byte; reply() reads a reply back.

import { Op } from "../src/vfs/fuse.js";

let nextUnique = 2n;

export function request(opcode: number, nodeid: bigint, args: Buffer, unique = nextUnique++): Buffer {
	const h = Buffer.alloc(40);
	h.writeUInt32LE(40 + args.length, 0);
	h.writeUInt32LE(opcode, 4);
	h.writeBigUInt64LE(unique, 8);
	h.writeBigUInt64LE(nodeid, 16);
	h.writeUInt32LE(0, 24); // uid
	h.writeUInt32LE(0, 28); // gid
	h.writeUInt32LE(1234, 32); // pid
	return Buffer.concat([h, args]);
}

const z = (s: string): Buffer => Buffer.concat([Buffer.from(s), Buffer.alloc(1)]);
const u32s = (...v: number[]): Buffer => {
	const b = Buffer.alloc(4 * v.length);
	v.forEach((x, i) => b.writeUInt32LE(x, 4 * i));
	return b;
};

/** fuse_init_in of a 6.1 kernel: 7.38, with flags2 and the unused words. */
export const init = (unique = 1n): Buffer =>
	request(Op.INIT, 0n, Buffer.concat([u32s(7, 38, 131072, 0x73fffffb, 0), Buffer.alloc(44)]), unique);
export const lookup = (parent: bigint, name: string): Buffer => request(Op.LOOKUP, parent, z(name));
export const getattr = (node: bigint): Buffer => request(Op.GETATTR, node, Buffer.alloc(16));
export const open = (node: bigint, flags = 0): Buffer => request(Op.OPEN, node, u32s(flags, 0));
export const opendir = (node: bigint): Buffer => request(Op.OPENDIR, node, u32s(0, 0));

function rw(fh: bigint, offset: bigint, size: number): Buffer {
	const b = Buffer.alloc(40);
	b.writeBigUInt64LE(fh, 0);
	b.writeBigUInt64LE(offset, 8);
	b.writeUInt32LE(size, 16);
	return b;
}

export const read = (node: bigint, offset: number, size: number): Buffer => request(Op.READ, node, rw(0n, BigInt(offset), size));
export const readdir = (node: bigint, offset: number, size: number): Buffer => request(Op.READDIR, node, rw(0n, BigInt(offset), size));
export const write = (node: bigint, offset: number, data: Buffer): Buffer =>
	request(Op.WRITE, node, Buffer.concat([rw(0n, BigInt(offset), data.length), data]));
export const create = (parent: bigint, name: string, mode = 0o100644, flags = 0o101): Buffer =>
	request(Op.CREATE, parent, Buffer.concat([u32s(flags, mode, 0o022, 0), z(name)]));
export const mkdir = (parent: bigint, name: string, mode = 0o755): Buffer =>
	request(Op.MKDIR, parent, Buffer.concat([u32s(mode, 0o022), z(name)]));
export const unlink = (parent: bigint, name: string): Buffer => request(Op.UNLINK, parent, z(name));
export const rmdir = (parent: bigint, name: string): Buffer => request(Op.RMDIR, parent, z(name));
export const rename = (parent: bigint, from: string, newdir: bigint, to: string): Buffer => {
	const h = Buffer.alloc(8);
	h.writeBigUInt64LE(newdir, 0);
	return request(Op.RENAME, parent, Buffer.concat([h, z(from), z(to)]));
};
export const setattrSize = (node: bigint, size: number): Buffer => {
	const b = Buffer.alloc(88);
	b.writeUInt32LE(1 << 3, 0); // FATTR_SIZE
	b.writeBigUInt64LE(BigInt(size), 16);
	return request(Op.SETATTR, node, b);
};
export const forget = (node: bigint, n: bigint): Buffer => {
	const b = Buffer.alloc(8);
	b.writeBigUInt64LE(n, 0);
	return request(Op.FORGET, node, b);
};
export const release = (node: bigint): Buffer => request(Op.RELEASE, node, Buffer.alloc(24));
export const statfs = (): Buffer => request(Op.STATFS, 1n, Buffer.alloc(0));

export interface Reply {
	len: number;
	error: number;
	unique: bigint;
	body: Buffer;
}

export function reply(b: Buffer): Reply {
	return { len: b.readUInt32LE(0), error: b.readInt32LE(4), unique: b.readBigUInt64LE(8), body: b.subarray(16) };
}

/** fuse_entry_out: the node id and the attr's size and mode. */
export function entry(body: Buffer): { node: bigint; size: bigint; mode: number } {
	return { node: body.readBigUInt64LE(0), size: body.readBigUInt64LE(40 + 8), mode: body.readUInt32LE(40 + 60) };
}

/** fuse_dirent names of a READDIR reply. */
export function dirents(body: Buffer): string[] {
	const names: string[] = [];
	for (let at = 0; at + 24 <= body.length;) {
		const n = body.readUInt32LE(at + 16);
		names.push(body.subarray(at + 24, at + 24 + n).toString());
		at += (24 + n + 7) & ~7;
	}
	return names;
}
