// The image packages the examples import by name, as the seed imports
// `@torkbot/sandbox-image-*`: guest/images/image-package.sh writes them
// (make image), tools/sdk-build links them into dist/node_modules. Typed
// here, so tsc needs no image built.
declare module "@kiln/sandbox-image-debian-12-agent" {
	export const image: import("@kiln/sandbox").RootfsImageInput;
}
