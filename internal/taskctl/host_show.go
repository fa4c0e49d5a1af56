package taskctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

func (t *tool) hostShowCommand() *cli.Command {
	return &cli.Command{
		Name:  "show",
		Usage: "print what a host reported of itself: OS, CPUs and their features, memory, client version, coprocessors (GPUs)",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "host", Required: true, Usage: "host id"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON (the host row and its coprocessors) instead of text"},
		},
		Action: func(c *cli.Context) error {
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				h, err := st.HostGet(ctx, c.Int64("host"))
				if err != nil {
					return err
				}
				cs, err := protocol.DecodeCoprocs(h.Coprocs)
				if err != nil {
					// Shown as stored: the operator sees what is there.
					t.notef("host %d: coprocessors not readable (%v): %q\n", h.ID, err, h.Coprocs)
				}
				if c.Bool("json") {
					enc := json.NewEncoder(t.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(struct {
						Host    row.Host          `json:"host"`
						Coprocs []protocol.Coproc `json:"coprocs"`
					}{h, cs})
				}
				return t.printHost(h, cs)
			})
		},
	}
}

func (t *tool) printHost(h row.Host, cs []protocol.Coproc) error {
	t.printf("host %d (user %d), %s, cpid %s\n", h.ID, h.UserID, orDefault(h.DomainName, "no domain name"), orDefault(h.HostCPID, "none"))
	last := "never"
	if h.RPCTime > 0 {
		last = time.Unix(h.RPCTime, 0).UTC().Format(time.RFC3339)
	}
	t.printf("last request %s from %s, rpc_seqno %d, client %s\n", last, orDefault(h.LastIPAddr, "unknown"), h.RPCSeqno,
		clientVersionText(h.ClientVersion))
	t.printf("OS: %s %s\n", h.OSName, h.OSVersion)
	t.printf("CPU: %s %s; %d CPUs at %.3g GFLOPS each\n", h.PVendor, h.PModel, max(h.PNCPUs, 1), h.PFpops/1e9)
	t.printf("CPU features: %s\n", orDefault(h.PFeatures, "none reported"))
	t.printf("memory %s, swap %s, disk %s free of %s\n", bytesText(h.MNbytes), bytesText(h.MSwap), bytesText(h.DFree), bytesText(h.DTotal))
	t.printf("on %.0f%% of the time, computing %.0f%% of that; average turnaround %.0f s; %d valid in a row, error streak %d\n",
		h.OnFrac*100, h.ActiveFrac*100, h.AvgTurnaround, h.ConsecutiveValid, h.ErrorStreak)
	if len(cs) == 0 {
		t.printf("coprocessors: none\n")
		return nil
	}
	t.printf("coprocessors:\n")
	tw := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TYPE\tCOUNT\tNAME\tRAM\tPEAK GFLOPS\tDRIVER\tDETAILS")
	for _, c := range cs {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%.0f\t%s\t%s\n", c.Type, c.Count, orDefault(c.Name, "-"), bytesText(c.RAM), c.PeakFlops/1e9,
			orDefault(intText(c.DriverVersion), "-"), orDefault(coprocDetails(c), "-"))
	}
	return tw.Flush()
}

// coprocDetails is what a plan class may test of c beyond its columns.
func coprocDetails(c protocol.Coproc) string {
	var d []string
	if c.HaveCUDA {
		d = append(d, "CUDA "+intText(c.CUDAVersion))
	}
	if c.ComputeCapability > 0 {
		d = append(d, fmt.Sprintf("compute capability %d.%d", c.ComputeCapability/100, c.ComputeCapability%100))
	}
	if c.HaveCAL {
		d = append(d, "CAL")
	}
	if c.CALTarget > 0 {
		d = append(d, fmt.Sprintf("CAL target %d", c.CALTarget))
	}
	if c.ATILibs {
		d = append(d, "ATI libraries")
	}
	if c.AMDLibs {
		d = append(d, "AMD libraries")
	}
	if c.MetalSupport > 0 {
		d = append(d, fmt.Sprintf("Metal %d", c.MetalSupport))
	}
	if o := c.OpenCL; o != nil {
		s := orDefault(o.DeviceVersion, "OpenCL")
		if o.DoubleFPConfig != 0 {
			s += ", double precision"
		}
		d = append(d, s)
	}
	return strings.Join(d, "; ")
}

func intText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

// clientVersionText is 72002 as "7.20.2".
func clientVersionText(v int) string {
	if v <= 0 {
		return "version unknown"
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// coprocsSummary is a host's coprocessors on one line, "none" if it has
// none.
func coprocsSummary(stored string) string {
	cs, err := protocol.DecodeCoprocs(stored)
	if err != nil {
		return "not readable"
	}
	if len(cs) == 0 {
		return "none"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%d × %s", c.Count, c.Type)
		if c.Name != "" {
			parts[i] += " (" + c.Name + ")"
		}
	}
	return strings.Join(parts, ", ")
}
