// The coscheduling scheduler for the local cluster's gang scheduling tests: the
// kube-scheduler command of sigs.k8s.io/scheduler-plugins with only its Coscheduling
// plugin (a smaller build than the module's cmd/scheduler, which links every plugin).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // rest client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// The scheme that reads the plugins' args (CoschedulingArgs) in the config file.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))
	os.Exit(cli.Run(command))
}
