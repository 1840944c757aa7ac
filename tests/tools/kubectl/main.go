// The kubectl the README test runs the laptop steps with: the upstream command
// (k8s.io/kubernetes/cmd/kubectl, without the cloud auth plugins) built from the
// Go module proxy by ../kubectl.sh. Nothing here is imported by the Python project.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
