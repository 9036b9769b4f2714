// containerd-shim-kiln-v2: containerd's runtime v2 shim for Kiln
// (Documentation/containerd.md). containerd finds it on its PATH for the
// runtime name io.containerd.kiln.v2.
package main

import "github.com/containerd/containerd/runtime/v2/shim"

func main() {
	shim.Run("io.containerd.kiln.v2", newService)
}
