package simreport

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	svgWidth    = 1020.0
	svgHeight   = 540.0
	plotLeft    = 64.0
	plotRight   = 720.0
	plotTop     = 48.0
	plotBottom  = 480.0
	legendLeft  = 740.0
	legendTop   = 64.0
	legendLine  = 40.0
	maxXTicks   = 12
	yTickStep   = 0.1
	lineWidth   = 2.5 // cumulative share
	thinWidth   = 1.0 // per-interval share
	thinOpacity = 0.45
)

// palette colours projects in order (Okabe–Ito, readable by colour-blind
// readers); more projects than colours reuse them.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

// WriteSVG plots each project's share of the computing over time as a
// standalone SVG: a thick line for its cumulative achieved share, a thin
// step line for the share of each interval, and a dashed line at its
// resource share, with hour ticks on the x axis and a legend. The thick
// lines are polylines of class "cumulative", the thin ones of class
// "interval", one of each per project when the report has samples.
func (r Report) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	end := r.DurationSeconds
	if n := len(r.Series); n > 0 {
		end = max(end, r.Series[n-1].Time)
	}
	if !(end > 0) || math.IsInf(end, 0) {
		end = 1
	}
	x := func(t float64) float64 { return plotLeft + (plotRight-plotLeft)*clamp(t/end, 0, 1) }
	y := func(s float64) float64 { return plotBottom - (plotBottom-plotTop)*clamp(s, 0, 1) }

	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("Share of CPU time — %s, strategy %s, %d hosts (%s clock)",
		orDash(r.Scenario), orDash(r.Strategy), r.Hosts, orDash(r.Clock))
	fmt.Fprintf(bw, `<title>%s</title>`+"\n", escape(title))
	fmt.Fprintf(bw, `<text x="%g" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", plotLeft, escape(title))

	// Grid and y axis: shares 0 to 1.
	bw.WriteString(`<g class="y-axis" stroke="#ddd" stroke-width="1">` + "\n")
	for i := 0; i <= int(math.Round(1/yTickStep)); i++ {
		fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n",
			num(plotLeft), num(y(float64(i)*yTickStep)), num(plotRight), num(y(float64(i)*yTickStep)))
	}
	bw.WriteString("</g>\n")
	bw.WriteString(`<g class="y-labels" text-anchor="end">` + "\n")
	for i := 0; i <= int(math.Round(1/yTickStep)); i += 2 {
		s := float64(i) * yTickStep
		fmt.Fprintf(bw, `<text x="%s" y="%s">%.0f%%</text>`+"\n", num(plotLeft-6), num(y(s)+4), 100*s)
	}
	bw.WriteString("</g>\n")
	fmt.Fprintf(bw, `<text transform="translate(16 %s) rotate(-90)" text-anchor="middle">share of CPU time</text>`+"\n",
		num((plotTop+plotBottom)/2))

	// x axis: time since start.
	step, unit, unitName := timeTicks(end)
	bw.WriteString(`<g class="x-axis" text-anchor="middle">` + "\n")
	for t := 0.0; t <= end*(1+1e-9); t += step {
		fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999"/>`+"\n",
			num(x(t)), num(plotBottom), num(x(t)), num(plotBottom+5))
		fmt.Fprintf(bw, `<text x="%s" y="%s">%s</text>`+"\n", num(x(t)), num(plotBottom+19), strconv.FormatFloat(t/unit, 'f', -1, 64))
	}
	bw.WriteString("</g>\n")
	fmt.Fprintf(bw, `<text x="%s" y="%s" text-anchor="middle">%s since start</text>`+"\n",
		num((plotLeft+plotRight)/2), num(plotBottom+40), unitName)
	fmt.Fprintf(bw, `<path d="M%s %sV%sH%s" fill="none" stroke="#333"/>`+"\n",
		num(plotLeft), num(plotTop), num(plotBottom), num(plotRight))

	for p, proj := range r.Projects {
		colour := palette[p%len(palette)]
		fmt.Fprintf(bw, `<g class="project" data-project="%s">`+"\n", escape(proj.Name))
		fmt.Fprintf(bw, `<line class="resource-share" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
			num(plotLeft), num(y(proj.ResourceShare)), num(plotRight), num(y(proj.ResourceShare)), colour)
		if len(r.Series) > 0 {
			var thin, thick strings.Builder
			start := 0.0
			for i, s := range r.Series {
				if p >= len(s.Shares) || p >= len(s.Cumulative) {
					continue
				}
				fmt.Fprintf(&thin, "%s,%s %s,%s ", num(x(start)), num(y(s.Shares[p])), num(x(s.Time)), num(y(s.Shares[p])))
				if i == 0 {
					fmt.Fprintf(&thick, "%s,%s ", num(x(start)), num(y(s.Cumulative[p])))
				}
				fmt.Fprintf(&thick, "%s,%s ", num(x(s.Time)), num(y(s.Cumulative[p])))
				start = s.Time
			}
			fmt.Fprintf(bw, `<polyline class="interval" points="%s" fill="none" stroke="%s" stroke-width="%g" stroke-opacity="%g"/>`+"\n",
				strings.TrimSpace(thin.String()), colour, thinWidth, thinOpacity)
			fmt.Fprintf(bw, `<polyline class="cumulative" points="%s" fill="none" stroke="%s" stroke-width="%g"/>`+"\n",
				strings.TrimSpace(thick.String()), colour, lineWidth)
		}
		bw.WriteString("</g>\n")
	}

	// Legend.
	bw.WriteString(`<g class="legend">` + "\n")
	for p, proj := range r.Projects {
		colour := palette[p%len(palette)]
		top := legendTop + float64(p)*legendLine
		fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%g"/>`+"\n",
			num(legendLeft), num(top), num(legendLeft+24), num(top), colour, lineWidth)
		fmt.Fprintf(bw, `<text x="%s" y="%s" font-weight="bold">%s</text>`+"\n", num(legendLeft+30), num(top+4), escape(proj.Name))
		fmt.Fprintf(bw, `<text x="%s" y="%s">achieved %.1f%%, resource share %.1f%%</text>`+"\n",
			num(legendLeft+30), num(top+19), 100*proj.AchievedShare, 100*proj.ResourceShare)
	}
	key := legendTop + float64(len(r.Projects))*legendLine + 8
	fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333" stroke-width="%g"/><text x="%s" y="%s">cumulative share</text>`+"\n",
		num(legendLeft), num(key), num(legendLeft+24), num(key), lineWidth, num(legendLeft+30), num(key+4))
	fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333" stroke-width="%g" stroke-opacity="%g"/><text x="%s" y="%s">share per %s</text>`+"\n",
		num(legendLeft), num(key+18), num(legendLeft+24), num(key+18), thinWidth, thinOpacity, num(legendLeft+30), num(key+22), escape(formatInterval(r.IntervalSeconds)))
	fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333" stroke-width="1.5" stroke-dasharray="6 4"/><text x="%s" y="%s">resource share</text>`+"\n",
		num(legendLeft), num(key+36), num(legendLeft+24), num(key+36), num(legendLeft+30), num(key+40))
	bw.WriteString("</g>\n</svg>\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write svg report: %w", err)
	}
	return nil
}

// tickSteps are the x-axis steps to choose from, in seconds: round numbers
// of seconds, minutes, hours and days.
var tickSteps = []float64{
	1, 2, 5, 10, 15, 30,
	60, 120, 300, 600, 900, 1800,
	3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
	86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400,
}

// timeTicks picks the smallest round step giving at most maxXTicks ticks
// over [0, end], and the unit to label it in: hours for runs of hours,
// minutes and seconds for short live runs.
func timeTicks(end float64) (step, unit float64, unitName string) {
	step = tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if end/s <= maxXTicks {
			step = s
			break
		}
	}
	for end/step > maxXTicks { // runs of years
		step *= 2
	}
	switch {
	case step >= 3600 || end >= 2*3600: // e.g. 15 min steps over 2.5 h read 0.25, 0.5, ... hours
		return step, 3600, "hours"
	case step >= 60:
		return step, 60, "minutes"
	default:
		return step, 1, "seconds"
	}
}

// formatInterval names a series interval the way the legend reads it:
// "1 h", "15 min", "30 s".
func formatInterval(s float64) string {
	switch {
	case s >= 3600 && math.Mod(s, 3600) == 0:
		return strconv.FormatFloat(s/3600, 'f', -1, 64) + " h"
	case s >= 60 && math.Mod(s, 60) == 0:
		return strconv.FormatFloat(s/60, 'f', -1, 64) + " min"
	default:
		return strconv.FormatFloat(s, 'g', 4, 64) + " s"
	}
}

// num formats a coordinate with at most two decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// clamp bounds v to [lo, hi]; NaN becomes lo.
func clamp(v, lo, hi float64) float64 {
	if !(v > lo) {
		return lo
	}
	return min(v, hi)
}

// escape makes s safe as XML character data or an attribute value.
func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}
