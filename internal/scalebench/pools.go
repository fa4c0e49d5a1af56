package scalebench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ParsePools reads a buffer-pool sweep: sizes as innodb_buffer_pool_size
// takes them (a number of bytes, or with K, M, G or T), separated by
// spaces or commas, returned smallest first. Empty means no sweep.
func ParsePools(s string) ([]string, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' })
	if len(fields) == 0 {
		return nil, nil
	}
	return sortPools(fields)
}

// sortPools checks each pool's size and sorts them, smallest first; a
// size given twice is an error (two spellings of one pool would be
// measured twice and split its working set).
func sortPools(pools []string) ([]string, error) {
	out := slices.Clone(pools)
	mb := map[string]float64{}
	for _, p := range out {
		v, err := poolMB(p)
		if err != nil {
			return nil, err
		}
		for q, w := range mb {
			if w == v {
				return nil, fmt.Errorf("buffer pools %q and %q are the same size", q, p)
			}
		}
		mb[p] = v
	}
	slices.SortFunc(out, func(a, b string) int { return int(math.Copysign(1, mb[a]-mb[b])) })
	return out, nil
}

// poolMB is a buffer-pool size in MiB.
func poolMB(p string) (float64, error) {
	num, mult := p, 1.0/(1<<20)
	if n := len(p); n > 0 {
		switch p[n-1] {
		case 'k', 'K':
			num, mult = p[:n-1], 1.0/(1<<10)
		case 'm', 'M':
			num, mult = p[:n-1], 1
		case 'g', 'G':
			num, mult = p[:n-1], 1<<10
		case 't', 'T':
			num, mult = p[:n-1], 1<<20
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	// MariaDB's smallest buffer pool is 5 MiB (2 MiB with small pages);
	// anything smaller is a typo.
	if err != nil || float64(v)*mult < 5 {
		return 0, fmt.Errorf("buffer pool %q: want a size such as 256M or 4G, at least 5M", p)
	}
	return float64(v) * mult, nil
}
