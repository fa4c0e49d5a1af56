// Package trickle is the plug-in API of a project's own trickle handler:
// the project writes a Handler (what to do with a trickle-up message a
// running application sent: record its progress, check its intermediate
// result, answer it) and gets the whole daemon around it from Main: paging
// through unhandled messages, marking each handled once its handler
// succeeded (exactly once, whatever the replicas), queueing its replies as
// trickle-down messages in the same transaction, retries with back-off,
// metrics, and the stock trickle handler's flags (--variety, --mod,
// --extend-deadline, --credit-per-cpu-second, ...; without --handler-cmd).
//
//	func main() {
//		trickle.Main(trickle.Program{
//			NewHandler: func(env job.Env) (trickle.Handler, error) { return myHandler{}, nil },
//		})
//	}
package trickle

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/plugin"
	"github.com/taskserver/taskserver/internal/row"
	itrickle "github.com/taskserver/taskserver/internal/trickle"
	"github.com/taskserver/taskserver/job"
)

// Message is a trickle-up message: what the application of task
// ResultName, running on host HostID, sent with boinc_send_trickle_up.
type Message struct {
	ID     int64
	HostID int64
	// Variety is the application's name for the kind of message.
	Variety    string
	ResultName string
	// ReceivedTime is when the scheduler stored it (Unix seconds).
	ReceivedTime int64
	// XML is the message as the client sent it: <result_name>, <time>,
	// <variety>, then the application's own text.
	XML string
}

// Reply is a trickle-down message to the application that sent a
// message: the client writes Body to the task's slot directory, where the
// application reads it (boinc_receive_trickle_down). Body must not have a
// line with <result_name>, <time> or </trickle_down>, which the client
// would misread; such a reply fails the message (it is retried).
type Reply struct {
	Variety string
	Body    string
}

// Handler handles one trickle-up message.
type Handler interface {
	// Handle gets one unhandled message. Once it returns nil the message
	// is marked handled and the replies are queued for the host, in one
	// transaction; an error leaves the message to be handled again after a
	// back-off (10 s doubling to 1 h) while the others go on. Handle must
	// be idempotent: after a crash between Handle and the mark the message
	// is handled again. It is called from one goroutine at a time.
	Handle(ctx context.Context, m Message) ([]Reply, error)
}

// Program is a project's trickle handler program.
type Program struct {
	// Usage is the program's one-line description in --help; empty means
	// the stock one.
	Usage string
	// Flags are the program's own flags, beside the stock handler's.
	Flags []job.Flag
	// NewHandler returns the program's Handler. The daemon calls it once,
	// when its configuration is valid and its database open; an error
	// stops the program.
	NewHandler func(env job.Env) (Handler, error)
}

// Main runs p as the process's program: its flags from the command line,
// the environment and --config, then the daemon until SIGINT or SIGTERM,
// or for one pass with --one-pass. On error it prints one line and exits
// with status 1. Call it from main.
func Main(p Program) { itrickle.Main(adapt(p)) }

// Run runs the daemon as Main does, with args as the command line (args[0]
// is the program's name), until ctx ends; it returns what Main would exit
// with. Tests run one pass with it (--one-pass).
func Run(ctx context.Context, args []string, p Program) error {
	return itrickle.Run(ctx, args, adapt(p))
}

// adapt returns the daemon's program of p.
func adapt(p Program) itrickle.Program {
	return itrickle.Program{
		Usage: p.Usage,
		Flags: plugin.Flags(p.Flags),
		Check: func(*cli.Context) error {
			if p.NewHandler == nil {
				return errors.New("trickle handler: the program has no NewHandler")
			}
			return nil
		},
		Handler: func(c *cli.Context, env daemon.Env) (itrickle.Handler, error) {
			h, err := p.NewHandler(plugin.Env(c, env, "", p.Flags))
			if err != nil || h == nil {
				return nil, err
			}
			return handler{h: h}, nil
		},
	}
}

// handler adapts a Handler to the daemon's.
type handler struct{ h Handler }

func (a handler) Handle(ctx context.Context, m row.MsgFromHost) ([]itrickle.Reply, error) {
	replies, err := a.h.Handle(ctx, Message{ID: m.ID, HostID: m.HostID, Variety: m.Variety, ResultName: m.ResultName,
		ReceivedTime: m.CreateTime, XML: m.XML})
	if err != nil {
		return nil, err
	}
	out := make([]itrickle.Reply, len(replies))
	for i, r := range replies {
		out[i] = itrickle.Reply{Variety: r.Variety, Body: r.Body}
	}
	return out, nil
}
