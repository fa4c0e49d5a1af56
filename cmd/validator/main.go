// Command validator checks the outputs of each job's instances for an app:
// it finds a quorum of agreeing outputs, picks the canonical instance,
// judges instances reported later against it, checks known-answer jobs
// against their expected output, and grants credit. --checker selects how
// outputs are compared (bitwise, numeric, trust, command); a project with
// its own comparison writes its own main around the public package
// validator's Main instead (see examples/validator).
package main

import (
	"context"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/validator"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return validator.Run(ctx, args, validator.Program{})
}
