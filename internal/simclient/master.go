package simclient

import (
	"context"
	"errors"
	"math"
	"regexp"
	"slices"
	"strings"
)

// masterFetchRetryCap is the real client's MASTER_FETCH_RETRY_CAP: after
// this many failed reads of a master page in a row it tries again only
// after a long pause (masterRereadDefault, scaled).
const masterFetchRetryCap = 3

var (
	schedulerTag  = regexp.MustCompile(`<scheduler>\s*([^<\s]+)\s*</scheduler>`)
	schedulerLink = regexp.MustCompile(`<link\s+rel="boinc_scheduler"\s+href="\s*([^"\s]+)\s*"`)
)

// parseMaster returns the scheduler URLs a master page lists, in order,
// each once: <scheduler>URL</scheduler> elements and <link
// rel="boinc_scheduler" href="URL"> links (client/scheduler_op.cpp).
func parseMaster(page string) []string {
	var urls []string
	add := func(u string) {
		if u = strings.TrimSpace(u); u != "" && !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	for _, m := range schedulerTag.FindAllStringSubmatch(page, -1) {
		add(m[1])
	}
	for _, m := range schedulerLink.FindAllStringSubmatch(page, -1) {
		add(m[1])
	}
	return urls
}

// readMaster reads a's master page and takes its scheduler URLs. A new
// URL ends the RPC back-off (seed 002: "if got any new scheduler urls,
// nrpc_failures = 0, min_rpc_time = 0"). A failed read, or a page with
// no scheduler, backs the project off as a failed RPC does, for a long
// pause after masterFetchRetryCap in a row. It reports whether the host
// has scheduler URLs to try now.
func (h *host) readMaster(ctx context.Context, a *attachment, now float64) bool {
	h.r.c.masterFetches.Add(1)
	page, err := h.r.web.get(ctx, a.master)
	if ctx.Err() != nil {
		return false
	}
	var urls []string
	if err == nil {
		if urls = parseMaster(string(page)); len(urls) == 0 {
			err = errors.New("master page lists no scheduler")
		}
	}
	now = max(now, h.r.now())
	if err != nil {
		h.r.c.masterErrors.Add(1)
		a.masterFailures++
		h.cp.RPCFailed(a.p, now, h.rand())
		if a.masterFailures >= masterFetchRetryCap {
			a.p.MinRPC = max(a.p.MinRPC, now+h.r.opts.scaled(masterRereadDefault).Seconds())
		}
		h.r.warnRateLimited("master page read failed", "host", h.index, "project", h.r.projects[a.index].Name,
			"url", a.master, "error", err)
		return len(a.urls) > 0 && a.p.MinRPC <= now
	}
	fresh := false
	for _, u := range urls {
		fresh = fresh || !slices.Contains(a.urls, u)
	}
	if fresh {
		a.p.RPCFailures, a.p.MinRPC = 0, 0
	}
	a.urls, a.urlStart = urls, int(h.rand()*float64(len(urls)))%len(urls)
	a.masterPending, a.masterFailures = false, 0
	a.masterDue = now + h.r.opts.MasterReread.Seconds()
	if !(a.masterDue > now) {
		a.masterDue = math.Inf(1)
	}
	return true
}
