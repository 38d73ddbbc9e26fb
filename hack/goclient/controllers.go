package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// leaderElection acquires a Lease, sees it renewed, and releases it on cancel.
func leaderElection(ctx context.Context, cfg *rest.Config, name string) string {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return describe("client", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: namespace},
		Client:     c.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "goclient-" + name},
	}
	// Why: an elector that cannot write its Lease retries forever; 15 s is many retry periods.
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var led atomic.Bool
	var facts []string
	var mu sync.Mutex
	fact := func(s string) { mu.Lock(); facts = append(facts, s); mu.Unlock() }
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   3 * time.Second,
		RenewDeadline:   2 * time.Second,
		RetryPeriod:     200 * time.Millisecond,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				led.Store(true)
				first, err := c.CoordinationV1().Leases(namespace).Get(lctx, name, metav1.GetOptions{})
				if err != nil {
					fact(describe("get lease", err))
					cancel()
					return
				}
				out := waitFor(lctx, "renew", func() string {
					now, err := c.CoordinationV1().Leases(namespace).Get(lctx, name, metav1.GetOptions{})
					if err != nil {
						return describe("get lease", err)
					}
					if now.Spec.RenewTime == nil || first.Spec.RenewTime == nil || !now.Spec.RenewTime.After(first.Spec.RenewTime.Time) {
						return "not renewed"
					}
					return ""
				})
				if out != "" {
					fact(out)
				}
				cancel()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return describe("elector", err)
	}
	done := make(chan struct{})
	go func() { elector.Run(lctx); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return "elector never returned"
	}
	if !led.Load() {
		return "never acquired the lease"
	}
	lease, err := c.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return describe("get lease after release", err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		fact("not released: holder " + *lease.Spec.HolderIdentity)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(facts) == 0 && lease.Spec.LeaseTransitions == nil {
		return "no leaseTransitions"
	}
	return strings.Join(facts, "; ")
}

func eventSubject(ctx context.Context, e *env, name string) (*corev1.ConfigMap, string) {
	cm, err := e.client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta(name)}, metav1.CreateOptions{})
	if err != nil {
		return nil, describe("create subject", err)
	}
	return cm, ""
}

// eventsV1 records through client-go's tools/events (events.k8s.io/v1), as controller-runtime does.
func eventsV1(ctx context.Context, e *env) string {
	subject, out := eventSubject(ctx, e, "events-v1-subject")
	if out != "" {
		return out
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: e.client.EventsV1()})
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	broadcaster.StartRecordingToSink(bctx.Done())
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, "goclient")
	recorder.Eventf(subject, nil, corev1.EventTypeNormal, "Tested", "Check", "first note %d", 1)
	return waitFor(ctx, "event", func() string {
		list, err := e.client.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return describe("list", err)
		}
		for _, ev := range list.Items {
			if ev.Regarding.Name == subject.Name {
				return describeV1Event(ev)
			}
		}
		return "none listed"
	})
}

func describeV1Event(ev eventsv1.Event) string {
	var facts []string
	if ev.Reason != "Tested" || ev.Action != "Check" || ev.Type != "Normal" || ev.Note != "first note 1" {
		facts = append(facts, fmt.Sprintf("fields %s/%s/%s/%q", ev.Reason, ev.Action, ev.Type, ev.Note))
	}
	if ev.ReportingController != "goclient" || ev.Regarding.Kind != "ConfigMap" {
		facts = append(facts, fmt.Sprintf("reporting %q regarding kind %q", ev.ReportingController, ev.Regarding.Kind))
	}
	return strings.Join(facts, "; ")
}

// eventsCore records through record.EventRecorder (core/v1); the second identical event is
// aggregated by the client into a PATCH that raises count to 2.
func eventsCore(ctx context.Context, e *env) string {
	subject, out := eventSubject(ctx, e, "events-core-subject")
	if out != "" {
		return out
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.client.CoreV1().Events(namespace)})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "goclient"})
	find := func() (*corev1.Event, string) {
		list, err := e.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + subject.Name})
		if err != nil {
			return nil, describe("list", err)
		}
		if len(list.Items) != 1 {
			return nil, fmt.Sprintf("%d events", len(list.Items))
		}
		return &list.Items[0], ""
	}
	recorder.Event(subject, corev1.EventTypeWarning, "Tested", "same message")
	if out := waitFor(ctx, "first event", func() string { _, out := find(); return out }); out != "" {
		return out
	}
	recorder.Event(subject, corev1.EventTypeWarning, "Tested", "same message")
	return waitFor(ctx, "count 2", func() string {
		ev, out := find()
		if out != "" {
			return out
		}
		if ev.Count != 2 || ev.Reason != "Tested" || ev.Type != "Warning" || ev.Source.Component != "goclient" {
			return fmt.Sprintf("count %d reason %s type %s source %s", ev.Count, ev.Reason, ev.Type, ev.Source.Component)
		}
		return ""
	})
}

// discoveryRESTMapper resolves a CRD kind and a built-in through the deferred discovery RESTMapper.
func discoveryRESTMapper(ctx context.Context, e *env) string {
	dc, err := discovery.NewDiscoveryClientForConfig(e.json)
	if err != nil {
		return describe("client", err)
	}
	groups, resources, err := dc.ServerGroupsAndResources()
	if err != nil {
		return describe("groups and resources", err)
	}
	var facts []string
	found := map[string]bool{}
	for _, g := range groups {
		found["group "+g.Name] = true
	}
	for _, list := range resources {
		for _, r := range list.APIResources {
			found[list.GroupVersion+" "+r.Name] = true
		}
	}
	for _, want := range []string{"group goclient.kbind.dev", "group apps", "goclient.kbind.dev/v1 widgets", "goclient.kbind.dev/v1 widgets/status", "v1 configmaps", "apps/v1 deployments", "coordination.k8s.io/v1 leases", "events.k8s.io/v1 events"} {
		if !found[want] {
			facts = append(facts, "missing "+want)
		}
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, gk := range []schema.GroupKind{{Group: "goclient.kbind.dev", Kind: "Widget"}, {Group: "apps", Kind: "Deployment"}, {Group: "", Kind: "Namespace"}} {
		m, err := mapper.RESTMapping(gk)
		if err != nil {
			facts = append(facts, describe("mapping "+gk.String(), err))
			continue
		}
		facts = append(facts, fmt.Sprintf("%s=%s/%s", gk.Kind, m.Resource.Resource, m.Scope.Name()))
	}
	if _, err := mapper.RESTMapping(schema.GroupKind{Group: "nothere.kbind.dev", Kind: "Gadget"}); !apimeta.IsNoMatchError(err) {
		facts = append(facts, describe("unknown kind (want no match)", err))
	}
	want := "Widget=widgets/namespace; Deployment=deployments/namespace; Namespace=namespaces/root"
	if got := strings.Join(facts, "; "); got != want {
		return got
	}
	return ""
}

// widgetReconciler writes status.observed = spec.size through the manager's client.
type widgetReconciler struct {
	client     client.Client
	reconciles atomic.Int64
}

func (r *widgetReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.reconciles.Add(1)
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(schema.GroupVersionKind{Group: "goclient.kbind.dev", Version: "v1", Kind: "Widget"})
	if err := r.client.Get(ctx, req.NamespacedName, w); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
	if observed, _, _ := unstructured.NestedInt64(w.Object, "status", "observed"); observed == size {
		return reconcile.Result{}, nil
	}
	_ = unstructured.SetNestedField(w.Object, size, "status", "observed")
	return reconcile.Result{}, r.client.Status().Update(ctx, w)
}

// controllerRuntime runs a manager with a reconciler on Widgets, sees its status write, and reads
// the result back through the manager's cached client.
func controllerRuntime(ctx context.Context, e *env) string {
	mgr, err := ctrl.NewManager(e.protobuf, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return describe("manager", err)
	}
	r := &widgetReconciler{client: mgr.GetClient()}
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(schema.GroupVersionKind{Group: "goclient.kbind.dev", Version: "v1", Kind: "Widget"})
	if err := ctrl.NewControllerManagedBy(mgr).For(w).Named("widgets").Complete(r); err != nil {
		return describe("controller", err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { cancel(); <-done }()
	if _, err := e.dynamicWidgets().Create(ctx, widget("reconciled", 4), metav1.CreateOptions{}); err != nil {
		return describe("create", err)
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return "cache never synced"
	}
	out := waitFor(ctx, "status written", func() string {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(w.GroupVersionKind())
		if err := mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: namespace, Name: "reconciled"}, got); err != nil {
			return describe("cached get", err)
		}
		if observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observed"); observed != 4 {
			return fmt.Sprintf("status.observed %d", observed)
		}
		return ""
	})
	if out != "" {
		return out
	}
	if r.reconciles.Load() == 0 {
		return "no reconcile"
	}
	// The cached client lists what the informer holds.
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "goclient.kbind.dev", Version: "v1", Kind: "WidgetList"})
	if err := mgr.GetClient().List(ctx, list, client.InNamespace(namespace)); err != nil {
		return describe("cached list", err)
	}
	if len(list.Items) != 1 {
		return fmt.Sprintf("cached list: %d widgets", len(list.Items))
	}
	if err := e.dynamicWidgets().Delete(ctx, "reconciled", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return describe("delete", err)
	}
	return ""
}

// kubectlUnknownKind applies a kind no CRD serves; kubectl must say the mapping is missing.
func kubectlUnknownKind(ctx context.Context, e *env) string {
	manifest := "apiVersion: nothere.kbind.dev/v1\nkind: Gadget\nmetadata:\n  name: g\n  namespace: " + namespace + "\n"
	cmd := exec.CommandContext(ctx, e.kubectl, "--kubeconfig", e.kubecfg, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return "kubectl apply succeeded"
	}
	text := stderr.String()
	if strings.Contains(text, "resource mapping not found") && strings.Contains(text, "ensure CRDs are installed first") {
		return ""
	}
	first := strings.SplitN(strings.TrimSpace(text), "\n", 2)[0]
	if first == "" {
		return describe("kubectl", err)
	}
	return "kubectl said: " + first
}
