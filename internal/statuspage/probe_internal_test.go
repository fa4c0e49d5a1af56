package statuspage

import "testing"

func TestLastSuccess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, metrics, program string
		want                   float64
		found                  bool
	}{
		{"the program's own gauge", "# TYPE x gauge\ntaskserver_feeder_last_success_timestamp_seconds 1.7e+09\n", "feeder", 1.7e9, true},
		{"own gauge wins over a newer other", "taskserver_other_last_success_timestamp_seconds 9\ntaskserver_feeder_last_success_timestamp_seconds 5\n", "feeder", 5, true},
		{"another subsystem name: the newest", "taskserver_a_last_success_timestamp_seconds 3\ntaskserver_b_last_success_timestamp_seconds 7\n", "file_deleter", 7, true},
		{"labels with spaces", `taskserver_x_last_success_timestamp_seconds{k="a b"} 42` + "\n", "x", 42, true},
		{"comments only", "# HELP taskserver_x_last_success_timestamp_seconds h\n", "x", 0, false},
		{"other namespace ignored", "other_x_last_success_timestamp_seconds 4\n", "x", 0, false},
		{"a bad value skipped", "taskserver_x_last_success_timestamp_seconds abc\n", "x", 0, false},
		{"empty", "", "x", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := lastSuccess(tc.metrics, tc.program)
			if got != tc.want || found != tc.found {
				t.Errorf("lastSuccess(%q, %q) = %v, %v; want %v, %v", tc.metrics, tc.program, got, found, tc.want, tc.found)
			}
		})
	}
}

func TestAgeText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		secs float64
		want string
	}{{0, "0 s"}, {59.6, "60 s"}, {119, "119 s"}, {120, "2 min"}, {7199, "119 min"}, {7200, "2 h 0 min"}, {90000, "25 h 0 min"}, {200000, "2 d 7 h"}} {
		if got := ageText(&tc.secs); got != tc.want {
			t.Errorf("ageText(%v) = %q, want %q", tc.secs, got, tc.want)
		}
	}
	if got := ageText(nil); got != "-" {
		t.Errorf("ageText(nil) = %q, want -", got)
	}
}
