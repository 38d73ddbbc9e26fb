// Command goclient is conformance run (4)'s independent client: it exercises what Go controllers
// built on client-go and controller-runtime do against one API server and prints one line per
// case, `case: ok` or `case: <normalised outcome>`. The outcome text holds no resourceVersions,
// uids, timestamps or ports, so the runs against fakeapi and a real kube-apiserver compare line
// by line (conformance/tests/go_client.rs). It exits 0 even when cases fail; non-zero only when it
// cannot run at all (no kubeconfig, no namespace, no CRD).
//
// Usage: goclient -config KUBECONFIG [-kubectl PATH]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// namespace is fixed: each run gets a fresh server, and fixed names keep the outcome text stable.
const namespace = "goclient"

// A case returns "" for ok, or a normalised outcome.
type testCase struct {
	name string
	run  func(ctx context.Context, e *env) string
}

type env struct {
	json     *rest.Config
	protobuf *rest.Config
	kubectl  string
	kubecfg  string
	client   kubernetes.Interface
	requests *requestLog
	wlConfig *rest.Config
}

func main() {
	kubeconfig := flag.String("config", "", "kubeconfig of the server under test (controller-runtime owns -kubeconfig)")
	kubectl := flag.String("kubectl", "kubectl", "kubectl binary for the unknown-kind case")
	only := flag.String("only", "", "run only the cases whose name contains this")
	flag.Parse()
	// Why: the cases print facts on stdout; client-go's own chatter (throttling, fallbacks) goes to stderr.
	klog.SetOutput(os.Stderr)
	klog.LogToStderr(true)
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "goclient: -config is required")
		os.Exit(2)
	}
	base, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goclient: kubeconfig: %v\n", err)
		os.Exit(2)
	}
	base.QPS = 200
	base.Burst = 400
	e := &env{json: jsonConfig(base), protobuf: protobufConfig(base), kubectl: *kubectl, kubecfg: *kubeconfig}
	e.client = kubernetes.NewForConfigOrDie(e.json)
	e.requests = &requestLog{}
	e.wlConfig = rest.CopyConfig(e.json)
	e.wlConfig.Wrap(e.requests.wrap)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := setup(ctx, e); err != nil {
		fmt.Fprintf(os.Stderr, "goclient: setup: %v\n", err)
		os.Exit(1)
	}
	for _, c := range cases() {
		if *only != "" && !strings.Contains(c.name, *only) {
			continue
		}
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		outcome := c.run(cctx, e)
		ccancel()
		if outcome == "" {
			outcome = "ok"
		}
		fmt.Printf("%s: %s\n", c.name, normalise(outcome))
	}
}

func cases() []testCase {
	return []testCase{
		{"typed-json-configmap-crud", func(ctx context.Context, e *env) string { return configMapCRUD(ctx, e.json, "json-cm") }},
		{"typed-json-lease-crud", func(ctx context.Context, e *env) string { return leaseCRUD(ctx, e.json, "json-lease") }},
		{"typed-protobuf-configmap-crud", func(ctx context.Context, e *env) string { return configMapCRUD(ctx, e.protobuf, "pb-cm") }},
		{"typed-protobuf-secret-crud", func(ctx context.Context, e *env) string { return secretCRUD(ctx, e.protobuf, "pb-secret") }},
		{"typed-protobuf-lease-crud", func(ctx context.Context, e *env) string { return leaseCRUD(ctx, e.protobuf, "pb-lease") }},
		{"typed-protobuf-response", protobufResponse},
		{"dynamic-crd-crud", dynamicCRUD},
		{"watch-event-order", watchEventOrder},
		{"informer-resync", informerResync},
		{"watchlist-informer", watchListInformer},
		{"watchlist-raw", watchListRaw},
		{"ssa-conflict", ssaConflict},
		{"ssa-force", ssaForce},
		{"status-subresource", statusSubresource},
		{"finalizer-blocks-delete", finalizers},
		{"leader-election-json", func(ctx context.Context, e *env) string { return leaderElection(ctx, e.json, "le-json") }},
		{"leader-election-protobuf", func(ctx context.Context, e *env) string { return leaderElection(ctx, e.protobuf, "le-pb") }},
		{"events-v1-recorder", eventsV1},
		{"events-core-recorder", eventsCore},
		{"discovery-restmapper", discoveryRESTMapper},
		{"controller-runtime-reconcile", controllerRuntime},
		{"kubectl-apply-unknown-kind", kubectlUnknownKind},
	}
}

func jsonConfig(base *rest.Config) *rest.Config {
	c := rest.CopyConfig(base)
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	return c
}

// protobufConfig is what kube-controller-manager and most Go controllers set for built-in kinds.
func protobufConfig(base *rest.Config) *rest.Config {
	c := rest.CopyConfig(base)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// describe turns an error into stable text: the HTTP status code and reason for API errors.
func describe(step string, err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		return fmt.Sprintf("%s: %d %s", step, s.Code, s.Reason)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return step + ": timed out"
	}
	return fmt.Sprintf("%s: %v", step, err)
}

var (
	hostPort = regexp.MustCompile(`(127\.0\.0\.1|localhost|\[::1\]):[0-9]+`)
	digits   = regexp.MustCompile(`\b[0-9]{4,}\b`)
)

// normalise strips what differs between two servers of the same behaviour: ports and long numbers.
func normalise(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = hostPort.ReplaceAllString(s, "HOST")
	return digits.ReplaceAllString(s, "N")
}

// waitFor polls check until it returns "" (ok) or the context ends; it returns the last outcome.
func waitFor(ctx context.Context, what string, check func() string) string {
	last := what + ": never checked"
	for {
		if last = check(); last == "" {
			return ""
		}
		select {
		case <-ctx.Done():
			return what + ": timed out (" + last + ")"
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// requestLog records the requests sent through a rest.Config, to tell a WatchList from a LIST.
type requestLog struct {
	mu   sync.Mutex
	urls []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.urls = append(l.urls, r.Method+" "+r.URL.RequestURI())
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (l *requestLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.urls...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var widgetGVR = schema.GroupVersionResource{Group: "goclient.kbind.dev", Version: "v1", Resource: "widgets"}

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace}
}

func (e *env) dynamicWidgets() dynamic.ResourceInterface {
	return dynamic.NewForConfigOrDie(e.json).Resource(widgetGVR).Namespace(namespace)
}
