package boincimport

import (
	"encoding/xml"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// boincResultDoc is what the import reads of BOINC's result.xml_doc_in to
// tell whether an output carries an upload certificate.
type boincResultDoc struct {
	Files []struct {
		Name         string  `xml:"name"`
		MaxNbytes    float64 `xml:"max_nbytes"`
		XMLSignature *string `xml:"xml_signature"`
	} `xml:"file_info"`
}

// UploadPermits returns the upload permits the instances rs of one job need
// (see outputfile.Permit): one for each output, named in BOINC's
// xml_doc_in without an <xml_signature>, of an instance in progress, the
// task a volunteer's client holds. A project made by make_project signs no
// uploads, so without a permit our data server would refuse every output
// of the tasks in flight when it moves over. The permit's size limit is the
// output's max_nbytes, its expiry the instance's report deadline plus
// grace, as a certificate signed at sending would have. An unsent
// instance needs none: our scheduler signs its certificates when it sends
// it.
func UploadPermits(rs []row.Result, grace time.Duration) ([]outputfile.Permit, error) {
	var out []outputfile.Permit
	for _, r := range rs {
		if r.ServerState != state.ServerInProgress {
			continue
		}
		var d boincResultDoc
		if err := xml.Unmarshal([]byte("<doc>"+r.XMLDocIn+"</doc>"), &d); err != nil {
			return nil, fmt.Errorf("instance %s: parse xml_doc_in: %w", r.Name, err)
		}
		for _, f := range d.Files {
			if f.XMLSignature != nil && strings.TrimSpace(*f.XMLSignature) != "" {
				continue
			}
			name := strings.TrimSpace(f.Name)
			if !(f.MaxNbytes >= 1 && f.MaxNbytes <= math.MaxInt64/2) {
				return nil, fmt.Errorf("instance %s: output %s: max_nbytes %g: an output without a certificate needs a size limit", r.Name, name, f.MaxNbytes)
			}
			out = append(out, outputfile.Permit{Name: name, MaxNbytes: int64(f.MaxNbytes), Expires: r.ReportDeadline + int64(grace/time.Second)})
		}
	}
	return out, nil
}
