// The upstream TFJob controller for hack/bench --compare upstream: the TFJob reconciler
// of github.com/kubeflow/training-operator (the version in go.mod), and nothing else of
// that operator, on a controller-runtime manager of our own.
//
// Set up as upstream's cmd/training-operator.v1 sets it up for TFJob with gang scheduling
// off: the same scheme (client-go, kubeflow.org/v1 and both PodGroup groups, which the
// reconciler's watches look up), tensorflow.NewReconciler with the non-gang setup func,
// SetupWithManager with --controller-threads (upstream's default 1), upstream's zap
// defaults (development mode; the zap flags change them). Left out: the webhook server,
// the certificate rotation, every other job kind, leader election.
//
// Side by side (docs/operations.md): --enable-scheme, upstream's own flag, sets up the
// reconcilers of the kinds named instead (upstream's controllerv1.SupportedSchemeReconciler,
// the table its main uses), and --webhook-cert-dir serves their validating webhooks
// (upstream's webhooks.SupportedSchemeWebhook) with the certificate there: the operator
// as an install that runs every kind but TFJob has it, less the certificate rotation,
// which needs the operator's Secret mounted by a kubelet.
//
// Ours: --kube-api-qps/--kube-api-burst go onto the rest config as one token bucket
// that every client built from it shares (what upstream's main does from v1.9.1 on;
// --client-rate-limiter=per-client gives each client a bucket of its own), and
// --user-agent names every request it makes, so the apiserver's audit log can count
// them. /readyz answers 200 once the TFJob, pod and service informers have synced.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	controllerv1 "github.com/kubeflow/training-operator/pkg/controller.v1"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
	"github.com/kubeflow/training-operator/pkg/controller.v1/tensorflow"
	"github.com/kubeflow/training-operator/pkg/webhooks"
)

type options struct {
	metricsAddr string
	probeAddr   string
	namespace   string
	userAgent   string
	threads     int
	qps         float64
	burst       int
	limiter     string
	schemes     controllerv1.EnabledSchemes
	certDir     string
	webhookPort int
}

func parseFlags() (options, zap.Options) {
	var o options
	// --kubeconfig is controller-runtime's own flag (pkg/client/config); KUBECONFIG also works.
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `metrics endpoint address ("0" disables)`)
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `/healthz and /readyz address ("0" disables)`)
	flag.StringVar(&o.namespace, "namespace", "", "watch only this namespace (default: all)")
	flag.StringVar(&o.userAgent, "user-agent", "tfjob-upstream", "User-Agent of every API request")
	flag.IntVar(&o.threads, "controller-threads", 1, "concurrent TFJob reconciles (upstream's default 1)")
	flag.Float64Var(&o.qps, "kube-api-qps", 20, "client QPS (<= 0: no client-side limit)")
	flag.IntVar(&o.burst, "kube-api-burst", 30, "client burst")
	flag.StringVar(&o.limiter, "client-rate-limiter", "shared",
		"shared: one token bucket for every client built from the config (upstream v1.9.1+); "+
			"per-client: each client its own bucket of that size")
	flag.Var(&o.schemes, "enable-scheme", "a job kind to reconcile, as upstream's --enable-scheme, "+
		"repeatable (default: TFJob alone)")
	flag.StringVar(&o.certDir, "webhook-cert-dir", "", "serve the enabled kinds' validating "+
		"webhooks with tls.crt and tls.key from this directory (default: no webhooks)")
	flag.IntVar(&o.webhookPort, "webhook-port", 9443, "the webhooks' port")
	// upstream's own flags for the other kinds, with its defaults
	flag.StringVar(&config.Config.PyTorchInitContainerImage, "pytorch-init-container-image",
		config.PyTorchInitContainerImageDefault, "the image of the PyTorch workers' init container")
	flag.StringVar(&config.Config.PyTorchInitContainerTemplateFile, "pytorch-init-container-template-file",
		config.PyTorchInitContainerTemplateFileDefault, "the PyTorch workers' init container template")
	flag.IntVar(&config.Config.PyTorchInitContainerMaxTries, "pytorch-init-container-max-tries",
		config.PyTorchInitContainerMaxTriesDefault, "tries of the PyTorch workers' init container")
	flag.StringVar(&config.Config.MPIKubectlDeliveryImage, "mpi-kubectl-delivery-image",
		config.MPIKubectlDeliveryImageDefault, "the image of the MPI launcher's init container")
	zopts := zap.Options{Development: true, StacktraceLevel: zapcore.DPanicLevel} // upstream's
	zopts.BindFlags(flag.CommandLine)
	flag.Parse()
	return o, zopts
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kubeflowv1.AddToScheme(s))
	utilruntime.Must(volcanov1beta1.AddToScheme(s))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(s))
	return s
}

// informersSynced is the readiness check: the informers the TFJob controller reads.
func informersSynced(c cache.Cache) healthz.Checker {
	kinds := []client.Object{&kubeflowv1.TFJob{}, &corev1.Pod{}, &corev1.Service{}}
	return func(req *http.Request) error {
		for _, obj := range kinds {
			inf, err := c.GetInformer(req.Context(), obj, cache.BlockUntilSynced(false))
			if err != nil {
				return err
			}
			if !inf.HasSynced() {
				return fmt.Errorf("%T informer not synced", obj)
			}
		}
		return nil
	}
}

func run() error {
	o, zopts := parseFlags()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	log := ctrl.Log.WithName("setup")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = o.userAgent
	cfg.QPS, cfg.Burst, cfg.RateLimiter = float32(o.qps), o.burst, nil
	switch {
	case o.qps <= 0:
		cfg.QPS = -1 // client-go builds no limiter for a negative QPS
		o.limiter = "none"
	case o.limiter == "shared":
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(float32(o.qps), o.burst)
	case o.limiter != "per-client":
		return fmt.Errorf("--client-rate-limiter: %q is neither shared nor per-client", o.limiter)
	}

	mopts := ctrl.Options{
		Scheme:                 newScheme(),
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: o.probeAddr,
		LeaderElection:         false,
	}
	if o.namespace != "" {
		mopts.Cache.DefaultNamespaces = map[string]cache.Config{o.namespace: {}}
	}
	if o.certDir != "" {
		mopts.WebhookServer = webhook.NewServer(webhook.Options{Port: o.webhookPort, CertDir: o.certDir})
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if !o.schemes.Empty() {
		return runSchemes(mgr, o)
	}
	r := tensorflow.NewReconciler(mgr, common.GenNonGangSchedulerSetupFunc())
	if err := r.SetupWithManager(mgr, o.threads); err != nil {
		return fmt.Errorf("TFJob controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("informers", informersSynced(mgr.GetCache())); err != nil {
		return err
	}
	log.Info("starting the upstream TFJob controller", "userAgent", o.userAgent,
		"threads", o.threads, "qps", o.qps, "burst", o.burst, "rateLimiter", o.limiter)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// runSchemes runs the reconcilers (and with --webhook-cert-dir the webhooks) of the kinds
// --enable-scheme names, as upstream's main sets them up with gang scheduling off.
func runSchemes(mgr ctrl.Manager, o options) error {
	for _, s := range o.schemes {
		if err := controllerv1.SupportedSchemeReconciler[s](mgr, common.GenNonGangSchedulerSetupFunc(), o.threads); err != nil {
			return fmt.Errorf("%s controller: %w", s, err)
		}
		if o.certDir == "" {
			continue
		}
		setup, ok := webhooks.SupportedSchemeWebhook[s]
		if !ok {
			return fmt.Errorf("%s has no webhook", s)
		}
		if err := setup(mgr); err != nil {
			return fmt.Errorf("%s webhook: %w", s, err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	ready := healthz.Ping
	if o.certDir != "" {
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("started", ready); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting upstream's controllers", "schemes", o.schemes.String(),
		"webhooks", o.certDir != "", "userAgent", o.userAgent)
	return mgr.Start(ctrl.SetupSignalHandler())
}

func main() {
	if err := run(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "upstream-operator:", err)
		os.Exit(1)
	}
}
