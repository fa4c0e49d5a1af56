package scheduler

import (
	"encoding/xml"
	"io"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// planHost is what the plan classes check of host h (its row as updated
// from req by recordHost) for request req: the request's coprocessors,
// with the work asked of each, or, when the request has no <coprocs>, the
// ones stored from an earlier request; the CPUs and memory the volunteer
// lets BOINC use (BOINC's effective_ncpus and usable_ram: the working
// preferences' max_ncpus_pct and the larger of ram_max_used_busy_pct and
// ram_max_used_idle_pct).
func planHost(h row.Host, req *protocol.SchedulerRequest) planclass.Host {
	ph := planclass.Host{
		OSName: h.OSName, OSVersion: h.OSVersion, PVendor: h.PVendor, PModel: h.PModel, PFeatures: h.PFeatures,
		NCPUs: max(h.PNCPUs, 1), PFpops: h.PFpops, MemBytes: h.MNbytes, ClientVersion: h.ClientVersion, UserID: h.UserID,
	}
	if req != nil && req.Coprocs != nil {
		ph.Coprocs = req.Coprocs.Resources()
	} else if cs, err := protocol.DecodeCoprocs(h.Coprocs); err == nil {
		// A text that does not decode is no coprocessor: only this
		// scheduler writes it, and the next <coprocs> replaces it.
		ph.Coprocs = cs
	}
	if req == nil {
		return ph
	}
	p := readPrefs(req.WorkingGlobalPreferences.Inner)
	if pct := p["max_ncpus_pct"]; pct > 0 && pct < 100 {
		ph.NCPUs = max(int(float64(ph.NCPUs)*pct/100), 1)
	}
	if busy, idle := p["ram_max_used_busy_pct"], p["ram_max_used_idle_pct"]; busy > 0 && idle > 0 {
		ph.MemBytes *= min(max(busy, idle)/100, 1)
	}
	return ph
}

// readPrefs returns the numeric elements of a global preferences document
// outside its <venue> blocks (working preferences are already the
// venue's), the first of each name; anything unreadable is left out.
func readPrefs(doc string) map[string]float64 {
	out := map[string]float64{}
	if doc == "" {
		return out
	}
	d := xml.NewDecoder(strings.NewReader("<p>" + doc + "</p>"))
	var name string
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF || err != nil {
			return out
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Local == "venue" {
				if d.Skip() != nil {
					return out
				}
				continue
			}
			name = t.Name.Local
			text.Reset()
		case xml.CharData:
			if name != "" && text.Len() < 64 {
				text.Write(t)
			}
		case xml.EndElement:
			if t.Name.Local == name {
				if _, seen := out[name]; !seen {
					if f, err := strconv.ParseFloat(strings.TrimSpace(text.String()), 64); err == nil && finitePositive(f) {
						out[name] = f
					}
				}
			}
			name = ""
		}
	}
}
