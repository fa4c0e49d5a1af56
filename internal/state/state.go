// Package state defines BOINC's state codes for results and workunits as
// typed integers, with the numbers BOINC itself stores, so that an operator
// who knows BOINC knows our database.
package state

import "fmt"

// ServerState is result.server_state: where an instance is in its life on the
// server.
type ServerState int

// Result server states (BOINC's RESULT_SERVER_STATE_*). 3 (UNSENT_SEQ) is
// obsolete in BOINC and unused here.
const (
	ServerInactive   ServerState = 1
	ServerUnsent     ServerState = 2
	ServerInProgress ServerState = 4
	ServerOver       ServerState = 5
)

func (s ServerState) String() string {
	switch s {
	case ServerInactive:
		return "inactive"
	case ServerUnsent:
		return "unsent"
	case ServerInProgress:
		return "in_progress"
	case ServerOver:
		return "over"
	}
	return fmt.Sprintf("server_state(%d)", int(s))
}

// Outcome is result.outcome: how an instance that is OVER ended.
type Outcome int

// Result outcomes (BOINC's RESULT_OUTCOME_*).
const (
	OutcomeInit           Outcome = 0
	OutcomeSuccess        Outcome = 1
	OutcomeCouldntSend    Outcome = 2
	OutcomeClientError    Outcome = 3
	OutcomeNoReply        Outcome = 4
	OutcomeDidntNeed      Outcome = 5
	OutcomeValidateError  Outcome = 6
	OutcomeClientDetached Outcome = 7
)

func (o Outcome) String() string {
	switch o {
	case OutcomeInit:
		return "init"
	case OutcomeSuccess:
		return "success"
	case OutcomeCouldntSend:
		return "couldnt_send"
	case OutcomeClientError:
		return "client_error"
	case OutcomeNoReply:
		return "no_reply"
	case OutcomeDidntNeed:
		return "didnt_need"
	case OutcomeValidateError:
		return "validate_error"
	case OutcomeClientDetached:
		return "client_detached"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// ValidateState is result.validate_state: the validator's verdict.
type ValidateState int

// Validate states (BOINC's VALIDATE_STATE_*).
const (
	ValidateInit         ValidateState = 0
	ValidateValid        ValidateState = 1
	ValidateInvalid      ValidateState = 2
	ValidateNoCheck      ValidateState = 3
	ValidateInconclusive ValidateState = 4
	ValidateTooLate      ValidateState = 5
)

func (v ValidateState) String() string {
	switch v {
	case ValidateInit:
		return "init"
	case ValidateValid:
		return "valid"
	case ValidateInvalid:
		return "invalid"
	case ValidateNoCheck:
		return "no_check"
	case ValidateInconclusive:
		return "inconclusive"
	case ValidateTooLate:
		return "too_late"
	}
	return fmt.Sprintf("validate_state(%d)", int(v))
}

// ClientState is result.client_state: the state the client reported the
// task in (BOINC's RESULT_* client codes).
type ClientState int

// Client states as reported in a scheduler request's <state>.
const (
	ClientNew              ClientState = 0
	ClientFilesDownloading ClientState = 1
	ClientFilesDownloaded  ClientState = 2
	ClientComputeError     ClientState = 3
	ClientFilesUploading   ClientState = 4
	ClientFilesUploaded    ClientState = 5
	ClientAborted          ClientState = 6
	ClientUploadFailed     ClientState = 7
)

func (c ClientState) String() string {
	switch c {
	case ClientNew:
		return "new"
	case ClientFilesDownloading:
		return "files_downloading"
	case ClientFilesDownloaded:
		return "files_downloaded"
	case ClientComputeError:
		return "compute_error"
	case ClientFilesUploading:
		return "files_uploading"
	case ClientFilesUploaded:
		return "files_uploaded"
	case ClientAborted:
		return "aborted"
	case ClientUploadFailed:
		return "upload_failed"
	}
	return fmt.Sprintf("client_state(%d)", int(c))
}

// FileDeleteState is workunit.file_delete_state and result.file_delete_state.
type FileDeleteState int

// File delete states (BOINC's FILE_DELETE_*).
const (
	FileDeleteInit  FileDeleteState = 0
	FileDeleteReady FileDeleteState = 1
	FileDeleteDone  FileDeleteState = 2
	FileDeleteError FileDeleteState = 3
)

func (f FileDeleteState) String() string {
	switch f {
	case FileDeleteInit:
		return "init"
	case FileDeleteReady:
		return "ready"
	case FileDeleteDone:
		return "done"
	case FileDeleteError:
		return "error"
	}
	return fmt.Sprintf("file_delete_state(%d)", int(f))
}

// AssimilateState is workunit.assimilate_state.
type AssimilateState int

// Assimilate states (BOINC's ASSIMILATE_*).
const (
	AssimilateInit  AssimilateState = 0
	AssimilateReady AssimilateState = 1
	AssimilateDone  AssimilateState = 2
)

func (a AssimilateState) String() string {
	switch a {
	case AssimilateInit:
		return "init"
	case AssimilateReady:
		return "ready"
	case AssimilateDone:
		return "done"
	}
	return fmt.Sprintf("assimilate_state(%d)", int(a))
}

// ErrorMask is workunit.error_mask: why a job failed for good. Bits combine.
type ErrorMask int

// Workunit error bits (BOINC's WU_ERROR_*).
const (
	ErrCouldntSendResult    ErrorMask = 1
	ErrTooManyErrorResults  ErrorMask = 2
	ErrTooManySuccessResult ErrorMask = 4
	ErrTooManyTotalResults  ErrorMask = 8
	ErrCancelled            ErrorMask = 16
	ErrNoCanonicalResult    ErrorMask = 32
)

var errorMaskNames = []struct {
	bit  ErrorMask
	name string
}{
	{ErrCouldntSendResult, "couldnt_send_result"},
	{ErrTooManyErrorResults, "too_many_error_results"},
	{ErrTooManySuccessResult, "too_many_success_results"},
	{ErrTooManyTotalResults, "too_many_total_results"},
	{ErrCancelled, "cancelled"},
	{ErrNoCanonicalResult, "no_canonical_result"},
}

func (m ErrorMask) String() string {
	if m == 0 {
		return "none"
	}
	s := ""
	for _, b := range errorMaskNames {
		if m&b.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += b.name
		}
	}
	if rest := m &^ (ErrCouldntSendResult | ErrTooManyErrorResults | ErrTooManySuccessResult |
		ErrTooManyTotalResults | ErrCancelled | ErrNoCanonicalResult); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("0x%x", int(rest))
	}
	return s
}

// NoTransition is the transition_time BOINC stores for a job that needs no
// further attention from the transitioner (INT_MAX).
const NoTransition int64 = 1<<31 - 1
