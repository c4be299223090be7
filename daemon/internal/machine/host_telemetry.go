// The real host's samples for telemetry (HostTelemetry): /proc/stat's
// aggregate CPU line, /proc/meminfo's MemTotal and MemAvailable, and
// /proc/net/dev's byte counters of each device but lo.

package machine

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/stat (100 on every Linux
// architecture bcd builds for).
const clockTicks = 100

var _ HostTelemetry = (*Host)(nil)

// SampleHost reads /proc.
func (h *Host) SampleHost(uint64) (*HostSample, error) {
	return ReadHostSample("/proc")
}

// ReadHostSample reads the sample from a proc tree at root (tests pass
// their own).
func ReadHostSample(root string) (*HostSample, error) {
	s := &HostSample{CPUSeconds: map[string]float64{}}
	stat, err := os.ReadFile(root + "/stat")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			continue
		}
		for i, state := range []string{"user", "nice", "system", "idle", "iowait"} {
			ticks, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s/stat: %w", root, err)
			}
			if state == "nice" {
				state = "user"
			}
			s.CPUSeconds[state] += float64(ticks) / clockTicks
		}
	}
	meminfo, err := os.ReadFile(root + "/meminfo")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(meminfo), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseUint(f[1], 10, 64)
		switch {
		case err != nil:
		case f[0] == "MemTotal:":
			s.MemoryTotalBytes = kb << 10
		case f[0] == "MemAvailable:":
			s.MemoryAvailableBytes = kb << 10
		}
	}
	return s, readNetDev(root+"/net/dev", s)
}

// readNetDev adds each device's receive and transmit bytes (the first and
// ninth counters after the colon), lo left out.
func readNetDev(path string, s *HostSample) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, counters, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(counters)
		if !ok || len(fields) < 9 || strings.TrimSpace(name) == "lo" {
			continue
		}
		rx, err1 := strconv.ParseUint(fields[0], 10, 64)
		tx, err2 := strconv.ParseUint(fields[8], 10, 64)
		if err1 == nil && err2 == nil {
			s.NICs = append(s.NICs, NICSample{Device: strings.TrimSpace(name), RxBytes: rx, TxBytes: tx})
		}
	}
	return sc.Err()
}
