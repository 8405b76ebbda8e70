// scheduler-plugins' PodGroup controller for the local cluster's gang scheduling: what a
// full install runs beside the Coscheduling scheduler. It keeps each PodGroup's status
// (phase, running/succeeded/failed counts) as its pods come and go, and each status
// change is a PodGroup update, which is what makes Coscheduling retry a gang it turned
// down. Only the PodGroup reconciler of the module's pkg/controllers runs: the module's
// cmd/controller also runs the ElasticQuota one, which needs a CRD nothing here uses.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"sigs.k8s.io/scheduler-plugins/pkg/controllers"
)

func main() {
	// A flag set of our own: controller-runtime's init registers --kubeconfig on the
	// global one, and its lookup rules (in-cluster, ~/.kube) are not wanted here.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	probeAddr := fs.String("health-probe-bind-address", "127.0.0.1:8081", "where /healthz and /readyz are served")
	metricsAddr := fs.String("metrics-bind-address", "0", `where /metrics is served ("0": not served)`)
	qps := fs.Float64("kube-api-qps", 5, "client QPS to the apiserver (upstream --qps)")
	burst := fs.Int("kube-api-burst", 10, "client burst to the apiserver (upstream --burst)")
	workers := fs.Int("workers", 1, "concurrent reconciles")
	leaderElect := fs.Bool("leader-elect", false, "take the sched-plugins-controllers Lease in kube-system first (for more than one replica)")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := run(*kubeconfig, *probeAddr, *metricsAddr, float32(*qps), *burst, *workers, *leaderElect); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(kubeconfig, probeAddr, metricsAddr string, qps float32, burst, workers int, leaderElect bool) error {
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	config.QPS, config.Burst = qps, burst

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(schedv1alpha1.AddToScheme(scheme))

	ctrl.SetLogger(klog.NewKlogr())
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "sched-plugins-controllers", // upstream's, so the two exclude each other
		LeaderElectionNamespace: "kube-system",
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := (&controllers.PodGroupReconciler{
		Client:  mgr.GetClient(),
		Scheme:  mgr.GetScheme(),
		Workers: workers,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the PodGroup controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
