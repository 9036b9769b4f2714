// Stats: the VM's metrics (vm.metrics) in the shape containerd shows for
// a cgroup v2 container (`ctr task metrics`). The pod's VM is its
// containers' cgroup: every container of a pod reports the VM's figures.
package main

import (
	v2 "github.com/containerd/cgroups/v2/stats"
)

type vmMetrics struct {
	Vcpus []struct {
		CPUNs uint64 `json:"cpuNs"`
	} `json:"vcpus"`
	Devices []struct {
		Type           string `json:"type"`
		Requests       uint64 `json:"requests"`
		BytesFromGuest uint64 `json:"bytesFromGuest"`
		BytesToGuest   uint64 `json:"bytesToGuest"`
		RxBytes        uint64 `json:"rxBytes"`
		TxBytes        uint64 `json:"txBytes"`
	} `json:"devices"`
	Process struct {
		RSSBytes  *uint64 `json:"rssBytes"`
		AnonBytes *uint64 `json:"anonBytes"`
	} `json:"process"`
}

// Block devices (a root image) are io: what the guest wrote is wbytes,
// what it read rbytes; one entry, the VM's disk. virtio-fs shares are
// host files, not a block device, and are left out as a cgroup would.
func cgroupMetrics(m *vmMetrics, pids int) *v2.Metrics {
	out := &v2.Metrics{
		Pids:   &v2.PidsStat{Current: uint64(pids)},
		CPU:    &v2.CPUStat{},
		Memory: &v2.MemoryStat{},
	}
	for _, c := range m.Vcpus {
		out.CPU.UsageUsec += c.CPUNs / 1000
	}
	if m.Process.RSSBytes != nil {
		out.Memory.Usage = *m.Process.RSSBytes
	}
	if m.Process.AnonBytes != nil {
		out.Memory.Anon = *m.Process.AnonBytes
	}
	var blk *v2.IOEntry
	for _, d := range m.Devices {
		if d.Type != "virtio-blk" {
			continue
		}
		if blk == nil {
			blk = &v2.IOEntry{}
		}
		blk.Rbytes += d.BytesToGuest
		blk.Wbytes += d.BytesFromGuest
		blk.Rios += d.Requests
	}
	if blk != nil {
		out.Io = &v2.IOStat{Usage: []*v2.IOEntry{blk}}
	}
	return out
}
