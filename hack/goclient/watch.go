package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// watchEventOrder is a plain watch seeing create, update and delete as ADDED, MODIFIED, DELETED.
func watchEventOrder(ctx context.Context, e *env) string {
	api := e.client.CoreV1().ConfigMaps(namespace)
	w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=watched"})
	if err != nil {
		return describe("watch", err)
	}
	defer w.Stop()
	cm, err := api.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("watched")}, metav1.CreateOptions{})
	if err != nil {
		return describe("create", err)
	}
	cm.Data = map[string]string{"x": "y"}
	if _, err := api.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return describe("update", err)
	}
	if err := api.Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	var seen []string
	for len(seen) < 3 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return "watch closed after " + strings.Join(seen, ",")
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			seen = append(seen, string(ev.Type))
		case <-ctx.Done():
			return "timed out after " + strings.Join(seen, ",")
		}
	}
	if got := strings.Join(seen, ","); got != "ADDED,MODIFIED,DELETED" {
		return "events " + got
	}
	return ""
}

// eventLog is an informer handler that records what it sees, in order.
type eventLog struct {
	mu     sync.Mutex
	events []string
	resync int
}

func (l *eventLog) add(kind string, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, kind+" "+name)
}

func (l *eventLog) handler(only string) cache.ResourceEventHandlerFuncs {
	name := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			return m.GetName()
		}
		return "?"
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if name(obj) == only {
				l.add("add", only)
			}
		},
		UpdateFunc: func(old, obj any) {
			if name(obj) != only {
				return
			}
			if old.(metav1.Object).GetResourceVersion() == obj.(metav1.Object).GetResourceVersion() {
				l.mu.Lock()
				l.resync++
				l.mu.Unlock()
				return
			}
			l.add("update", only)
		},
		DeleteFunc: func(obj any) {
			if name(obj) == only {
				l.add("delete", only)
			}
		},
	}
}

func (l *eventLog) snapshot() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...), l.resync
}

// informerResync runs a SharedInformerFactory with a 1 s resync (client-go's minimum) over ConfigMaps.
func informerResync(ctx context.Context, e *env) string {
	log := &eventLog{}
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, time.Second, informers.WithNamespace(namespace))
	informer := factory.Core().V1().ConfigMaps().Informer()
	if _, err := informer.AddEventHandler(log.handler("informed")); err != nil {
		return describe("handler", err)
	}
	ictx, stop := context.WithCancel(ctx)
	defer func() { stop(); factory.Shutdown() }()
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return "cache never synced"
	}
	api := e.client.CoreV1().ConfigMaps(namespace)
	cm, err := api.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("informed")}, metav1.CreateOptions{})
	if err != nil {
		return describe("create", err)
	}
	if out := waitFor(ctx, "resync", func() string {
		if _, resync := log.snapshot(); resync == 0 {
			return "no resync"
		}
		return ""
	}); out != "" {
		return out
	}
	cm.Data = map[string]string{"x": "y"}
	if _, err := api.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return describe("update", err)
	}
	if err := api.Delete(ctx, "informed", metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	want := "add informed,update informed,delete informed"
	return waitFor(ctx, "events", func() string {
		events, _ := log.snapshot()
		if got := strings.Join(events, ","); got != want {
			return "events " + got
		}
		return ""
	})
}

// watchListInformer runs an informer whose initial list must come from a watch with
// sendInitialEvents=true (client-go's WatchListClient, on by default since v0.35) and reports
// whether the reflector fell back to a plain LIST.
func watchListInformer(ctx context.Context, e *env) string {
	api := e.client.CoreV1().ConfigMaps(namespace)
	if _, err := api.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("listed")}, metav1.CreateOptions{}); err != nil {
		return describe("create", err)
	}
	defer func() { _ = api.Delete(context.Background(), "listed", metav1.DeleteOptions{}) }()
	client, err := kubernetes.NewForConfig(e.wlConfig)
	if err != nil {
		return describe("client", err)
	}
	log := &eventLog{}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	informer := factory.Core().V1().ConfigMaps().Informer()
	if _, err := informer.AddEventHandler(log.handler("listed")); err != nil {
		return describe("handler", err)
	}
	ictx, stop := context.WithCancel(ctx)
	defer func() { stop(); factory.Shutdown() }()
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return "cache never synced"
	}
	events, _ := log.snapshot()
	var lists, watchLists int
	for _, url := range e.requests.snapshot() {
		if !strings.Contains(url, "/configmaps") {
			continue
		}
		switch {
		case strings.Contains(url, "watch=true") && strings.Contains(url, "sendInitialEvents=true"):
			watchLists++
		case !strings.Contains(url, "watch=true"):
			lists++
		}
	}
	var facts []string
	if watchLists == 0 {
		facts = append(facts, "no watch with sendInitialEvents")
	}
	if lists > 0 {
		facts = append(facts, "fell back to LIST")
	}
	if strings.Join(events, ",") != "add listed" {
		facts = append(facts, fmt.Sprintf("initial events %v", events))
	}
	return strings.Join(facts, "; ")
}

// watchListRaw is the request a reflector sends for its initial list and again after every watch
// error: sendInitialEvents=true with resourceVersionMatch=NotOlderThan, first without a
// resourceVersion, then from the last one it knew. Both must stream what exists as ADDED events
// and close the initial state with a bookmark annotated k8s.io/initial-events-end=true (client-go
// v0.35 waits for that bookmark and for nothing else). Without NotOlderThan the server refuses it.
func watchListRaw(ctx context.Context, e *env) string {
	api := e.client.CoreV1().ConfigMaps(namespace)
	if _, err := api.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("streamed")}, metav1.CreateOptions{}); err != nil {
		return describe("create", err)
	}
	defer func() { _ = api.Delete(context.Background(), "streamed", metav1.DeleteOptions{}) }()
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		return describe("list", err)
	}
	var facts []string
	for _, from := range []struct{ name, rv string }{{"from nothing", ""}, {"from a known version", list.ResourceVersion}} {
		send := true
		w, err := api.Watch(ctx, metav1.ListOptions{
			FieldSelector:        "metadata.name=streamed",
			ResourceVersion:      from.rv,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			SendInitialEvents:    &send,
			AllowWatchBookmarks:  true,
		})
		if err != nil {
			facts = append(facts, describe(from.name, err))
			continue
		}
		facts = append(facts, from.name+" "+initialEvents(ctx, w))
	}
	send := true
	_, err = api.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, SendInitialEvents: &send, AllowWatchBookmarks: true})
	facts = append(facts, describe("without NotOlderThan", err))
	got := strings.Join(facts, "; ")
	want := "from nothing ADDED streamed,END; from a known version ADDED streamed,END; without NotOlderThan: 422 Invalid"
	if got == want {
		return ""
	}
	return got
}

// initialEvents reads a watch until the initial-events-end bookmark (or 5 s of nothing) and names
// what it saw: ADDED name, BOOKMARK (plain), END (the closing bookmark).
func initialEvents(ctx context.Context, w watch.Interface) string {
	defer w.Stop()
	var seen []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return strings.Join(append(seen, "closed"), ",")
			}
			m, _ := ev.Object.(metav1.Object)
			switch {
			case ev.Type == watch.Bookmark && m != nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true":
				return strings.Join(append(seen, "END"), ",")
			case ev.Type == watch.Bookmark:
				seen = append(seen, "BOOKMARK")
			case m != nil:
				seen = append(seen, string(ev.Type)+" "+m.GetName())
			default:
				seen = append(seen, string(ev.Type))
			}
		case <-time.After(5 * time.Second):
			return strings.Join(append(seen, "no end bookmark in 5s"), ",")
		case <-ctx.Done():
			return strings.Join(append(seen, "timed out"), ",")
		}
	}
}
