// @kiln/sandbox: seed 003's Sandbox API on Kiln microVMs.

export { defineSandbox } from "./sandbox.js";
export type { Sandbox, SandboxOptions } from "./sandbox.js";
export type { BootOptions, SandboxResources } from "./config.js";
export { rootfs } from "./rootfs.js";
export type {
	RootfsBytesOptions, RootfsCowOptions, RootfsFlattenOptions, RootfsImageInput, SandboxBlockChunk,
	SandboxBlockRange, SandboxBlockStore, SandboxBlockStoreContext, SandboxComposedSource, SandboxCowRootfs,
	SandboxEphemeralRootfs, SandboxImage, SandboxPersistentRootfs, SandboxRootfs,
} from "./rootfs.js";
export { fs } from "./fs.js";
export type { BindMount, BindOptions, SandboxMount } from "./fs.js";
export type {
	MemoryFileSystemOptions, SandboxFileSystem, SandboxFileSystemStat, VirtualMount, WriteOptions,
} from "./vfs/index.js";
export { MemoryFileSystem, fsError } from "./vfs/index.js";
export { network, SandboxHeaders, addressClass } from "./network/index.js";
export type {
	AddressClass, DnsConnectionMatch, EndpointMatcher, HttpConnectionMatch, HttpMiddleware, NetworkPolicy,
	NetworkPolicyOptions, OnConnectionRequest, SandboxAddress, SandboxConnection, SandboxHttpDestination,
	SandboxHttpRequest, TransportMatch,
} from "./network/index.js";
export type { SandboxEnvironmentFact } from "./facts.js";
export { SandboxVm } from "./vm.js";
export type { ExecOptions, PtyOptions, SandboxExecResult, SpawnOptions, ProcessOptions } from "./vm.js";
export type { SandboxChildProcess, SandboxExit, SandboxPty, SandboxSignal } from "./process.js";
export type { SandboxDirEntry, SandboxFileStat, SandboxFileType, SandboxVmFileSystem } from "./vmfs.js";
export type { KilnOptions } from "./locate.js";
export type {
	FetchLike, FilesystemFacet, GuardedFetchOptions, McpServer, McpServerSpec, NetCheckRequest, NetCheckResult,
	NetCheckVerdict, NetworkFacet, SandboxFacets, ShellFacet, ToolsFacet,
} from "./facets.js";
export type { GlobOptions } from "./glob.js";
export type { SandboxService, ServiceProto, ServiceRegistry, ServiceSpec } from "./services.js";
export { PersonaView } from "./persona.js";
export type { PersonaGrant } from "./persona.js";
export * from "./launcher/index.js";
export {
	AgentUnreachableError, CancelledError, ConnectionClosedError, EgressDeniedError, GuestError, KilnRpcError,
	LimitError, NotSupportedError, PersonaRefusedError, PinMismatchError, SandboxConfigError, SandboxError, VmmError,
} from "./errors.js";
