package filedeleter

import (
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestNamesToDelete: every output, and the inputs that belong to the job
// alone, with their gzip'd copies: not a shared or no_delete file, not one
// kept on another server.
func TestNamesToDelete(t *testing.T) {
	t.Parallel()
	wu, err := jobxml.FormatWorkunit(jobxml.Workunit{CommandLine: "-n 3", Inputs: []jobxml.InputFile{
		{Name: "a_in", OpenName: "in", Nbytes: 10, MD5: "0123"},
		{Name: "shared_db", OpenName: "db", Sticky: true, NoDelete: true},
		{Name: "remote", OpenName: "r", URLs: []string{"http://x/remote"}},
		{Name: "b_in", OpenName: "in2", GzippedNbytes: 4},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := inputFiles(wu); err != nil || !slices.Equal(got, []file{{"a_in", ""}, {"b_in", ""}, {"b_in", ".gz"}}) {
		t.Errorf("inputFiles = %v, %v; want a_in, b_in, b_in.gz", got, err)
	}
	if got, err := inputFiles(`<workunit><file_info><name>old_in</name><open_name>in</open_name></file_info></workunit>`); err != nil || !slices.Equal(got, []file{{"old_in", ""}}) {
		t.Errorf("inputFiles of a document before version 5 = %v, %v", got, err)
	}
	res, _ := jobxml.FormatResult(storetest.Outputs("r_0", []string{"out", "log"}, 1e6))
	if got, err := outputFiles(res); err != nil || !slices.Equal(got, []file{{"r_0_0", ""}, {"r_0_1", ""}}) {
		t.Errorf("outputFiles = %v, %v", got, err)
	}
	if _, err := inputFiles(`<file_info><name>../etc</name></file_info><workunit><file_ref><file_name>../etc</file_name><open_name>in</open_name></file_ref></workunit>`); err == nil {
		t.Error("inputFiles accepted a path")
	}
}
