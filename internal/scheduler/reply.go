package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// addResults puts the results, with everything the client needs to run
// them, into the reply: the app, the app version, the input files, the
// workunit, the output files with their upload certificates, and the result.
// A result that cannot be described (its rows unreadable) is left out: it is
// in progress on the host, so the next request lists it as lost and it is
// resent then.
func (s *Service) addResults(ctx context.Context, x *rpc, items []sendItem) {
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.resultID
	}
	byID, wuByID, err := s.replyRows(ctx, x, ids)
	if err != nil {
		s.log.Error("read results to send", "host_id", x.host.ID, "error", err)
		return
	}
	b := replyBuilder{s: s, reply: x.reply, rsc: x.rsc,
		apps: map[string]bool{}, versions: map[string]bool{}, files: map[string]bool{}}
	// A sticky file the host holds is not described again: the client
	// links a <file_ref> to the <file_info> it already has by name
	// (client/client_state.cpp, link_file_ref), so the file is neither
	// downloaded nor listed twice.
	for _, f := range x.req.HostFiles {
		if f.Status == protocol.FilePresent {
			b.files[f.Name] = true
		}
	}
	for _, it := range items {
		r, ok := byID[it.resultID]
		if !ok {
			continue
		}
		wu, ok := wuByID[r.WorkunitID]
		if !ok {
			continue
		}
		if err := b.add(r, wu, it.v); err != nil {
			s.log.Error("describe result for reply", "result_id", r.ID, "host_id", x.host.ID, "error", err)
			continue
		}
		if it.resent {
			s.m.resultsResent.Inc()
			s.log.Debug("result resent", "result_id", r.ID, "host_id", x.host.ID)
		} else {
			s.log.Debug("result sent", "result_id", r.ID, "host_id", x.host.ID)
		}
	}
}

type replyBuilder struct {
	s     *Service
	reply *protocol.SchedulerReply
	// rsc are the host's resources, which versions' usage indexes.
	rsc      []protocol.Coproc
	apps     map[string]bool
	versions map[string]bool
	// files are the files the client has a <file_info> for: described
	// earlier in the reply, or sticky files the host holds.
	files map[string]bool
}

// add describes one result. Nothing is added to the reply unless all of it
// can be.
func (b *replyBuilder) add(r row.Result, wu row.Workunit, v version) error {
	in, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil {
		return fmt.Errorf("workunit %d: %w", wu.ID, err)
	}
	outs, err := jobxml.ParseResult(r.XMLDocIn)
	if err != nil {
		return fmt.Errorf("result %d: %w", r.ID, err)
	}
	var inFiles []protocol.FileInfo
	var wuRefs []protocol.FileRef
	for _, f := range in.Inputs {
		fi, err := b.input(f)
		if err != nil {
			return fmt.Errorf("workunit %d input: %w", wu.ID, err)
		}
		inFiles = append(inFiles, fi)
		wuRefs = append(wuRefs, protocol.FileRef{FileName: f.Name, OpenName: f.OpenName, CopyFile: empty(f.CopyFile)})
	}
	var outFiles []protocol.FileInfo
	var resRefs []protocol.FileRef
	for _, f := range outs {
		sig, err := b.s.signUploadCertificate(f.Name, f.MaxNbytes, r.ReportDeadline+int64(b.s.opts.UploadGrace/time.Second))
		if err != nil {
			return fmt.Errorf("sign upload certificate of %s: %w", f.Name, err)
		}
		outFiles = append(outFiles, protocol.FileInfo{Name: f.Name, URLs: []string{b.s.uploadURL},
			MaxNbytes: f.MaxNbytes, XMLSignature: sig})
		resRefs = append(resRefs, protocol.FileRef{FileName: f.Name, OpenName: f.OpenName, CopyFile: empty(f.CopyFile),
			Optional: empty(f.Optional)})
	}

	var verFiles []protocol.FileInfo
	var av *protocol.AppVersion
	if key := fmt.Sprintf("%s/%d/%s/%s", v.app.Name, v.versionNum, v.platform, v.planClass); !v.anonymous && !b.versions[key] {
		if verFiles, av, err = b.version(v); err != nil {
			return fmt.Errorf("app version %d: %w", v.av.ID, err)
		}
		b.versions[key] = true
		b.reply.AppVersions = append(b.reply.AppVersions, *av)
	}
	if !b.apps[v.app.Name] {
		b.apps[v.app.Name] = true
		b.reply.Apps = append(b.reply.Apps, protocol.App{Name: v.app.Name, UserFriendlyName: v.app.UserFriendlyName})
	}
	for _, f := range append(append(verFiles, inFiles...), outFiles...) {
		if !b.files[f.Name] {
			b.files[f.Name] = true
			b.reply.FileInfos = append(b.reply.FileInfos, f)
		}
	}
	b.reply.Workunits = append(b.reply.Workunits, protocol.Workunit{
		Name:           wu.Name,
		AppName:        v.app.Name,
		VersionNum:     v.versionNum,
		CommandLine:    in.CommandLine,
		RscFpopsEst:    wu.RscFpopsEst,
		RscFpopsBound:  wu.RscFpopsBound,
		RscMemoryBound: wu.RscMemoryBound,
		RscDiskBound:   wu.RscDiskBound,
		FileRefs:       wuRefs,
	})
	b.reply.Results = append(b.reply.Results, protocol.Result{
		Name:           r.Name,
		WUName:         wu.Name,
		Platform:       v.platform,
		VersionNum:     v.versionNum,
		PlanClass:      v.planClass,
		ReportDeadline: float64(r.ReportDeadline),
		FileRefs:       resRefs,
	})
	return nil
}

// input describes an input file: downloaded from its own URLs (a file kept
// on another server) or from the project's download directory, and, when
// a gzip'd copy is staged (NAME.gz in NAME's fan-out directory), from that
// copy's URLs, which the client prefers. The size and md5 stay those of
// the file itself: the client checks them after it gunzips the copy
// (client/cs_files.cpp, FILE_INFO::verify_file).
func (b *replyBuilder) input(f jobxml.InputFile) (protocol.FileInfo, error) {
	fi := protocol.FileInfo{Name: f.Name, URLs: f.URLs, MD5Cksum: f.MD5, Nbytes: f.Nbytes,
		Sticky: empty(f.Sticky), NoDelete: empty(f.NoDelete)}
	if len(fi.URLs) == 0 {
		rel, err := fanout.Rel(f.Name, b.s.opts.Fanout)
		if err != nil {
			return protocol.FileInfo{}, err
		}
		fi.URLs = []string{b.s.download + rel}
	}
	if f.GzippedNbytes > 0 {
		for _, u := range fi.URLs {
			fi.GzippedURLs = append(fi.GzippedURLs, u+".gz")
		}
		fi.GzippedNbytes = f.GzippedNbytes
	}
	return fi, nil
}

// version describes an app version: its <app_version> with its plan
// class, what a task uses (avg_ncpus, max_ncpus, <coproc>), its rate on
// this host (flops: the client estimates runtimes as rsc_fpops_est / flops)
// and its cmdline, and the <file_info> of each of its files, each signed
// (the client runs no unsigned app file, PROTOCOL.md §5.1) and the main
// program marked executable.
func (b *replyBuilder) version(v version) ([]protocol.FileInfo, *protocol.AppVersion, error) {
	av := &protocol.AppVersion{AppName: v.app.Name, VersionNum: v.versionNum, Platform: v.platform, Cmdline: v.cmdline,
		PlanClass: v.planClass, AvgNCPUs: v.avgNCPUs, Flops: finite(v.flops)}
	av.MaxNCPUs = max(v.maxNCPUs, v.avgNCPUs)
	if v.rsc > 0 && v.rsc < len(b.rsc) {
		av.Coprocs = []protocol.CoprocUsage{{Type: b.rsc[v.rsc].Type, Count: v.gpuUsage}}
	}
	if len(v.files) == 0 {
		return nil, av, nil
	}
	var infos []protocol.FileInfo
	for _, f := range v.files {
		rel, err := fanout.Rel(f.Name, b.s.opts.Fanout)
		if err != nil {
			return nil, nil, err
		}
		fi := protocol.FileInfo{Name: f.Name, URLs: []string{b.s.download + rel}, MD5Cksum: f.MD5, Nbytes: f.Nbytes,
			FileSignature: f.Signature}
		ref := protocol.FileRef{FileName: f.Name, OpenName: f.OpenName}
		if f.MainProgram {
			fi.Executable = &protocol.Empty{}
			ref.MainProgram = &protocol.Empty{}
		}
		if f.CopyFile {
			ref.CopyFile = &protocol.Empty{}
		}
		infos = append(infos, fi)
		av.FileRefs = append(av.FileRefs, ref)
	}
	return infos, av, nil
}

// signUploadCertificate signs the upload certificate of one output file,
// good until expires (Unix seconds): with the Ed25519 key when there is
// one, else with the RSA upload key. It returns the <xml_signature> text,
// which carries the expiry. Each certificate names its own file, so there
// is nothing to cache.
func (s *Service) signUploadCertificate(name string, maxNbytes float64, expires int64) (string, error) {
	cert := []byte(keys.UploadCertificate(name, maxNbytes, expires))
	if s.deps.UploadCertKey != nil {
		return keys.UploadSignature(keys.SignEd25519(s.deps.UploadCertKey, cert), expires), nil
	}
	sig, err := keys.Sign(s.deps.UploadKey, cert)
	if err != nil {
		return "", err
	}
	return keys.UploadSignature(sig, expires), nil
}

// empty is a flag element: present when on.
func empty(on bool) *protocol.Empty {
	if on {
		return &protocol.Empty{}
	}
	return nil
}
