package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// configMapCRUD is create, get, update, strategic-merge patch, list and delete of a ConfigMap.
func configMapCRUD(ctx context.Context, cfg *rest.Config, name string) string {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return describe("client", err)
	}
	api := c.CoreV1().ConfigMaps(namespace)
	created, err := api.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta(name), Data: map[string]string{"a": "1"}}, metav1.CreateOptions{})
	if err != nil {
		return describe("create", err)
	}
	if created.UID == "" || created.ResourceVersion == "" {
		return "create: no uid or resourceVersion"
	}
	got, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return describe("get", err)
	}
	got.Data["b"] = "2"
	updated, err := api.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		return describe("update", err)
	}
	if updated.ResourceVersion == created.ResourceVersion {
		return "update: resourceVersion unchanged"
	}
	// A stale update must conflict.
	if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		return describe("stale update (want 409 Conflict)", err)
	}
	patched, err := api.Patch(ctx, name, types.StrategicMergePatchType, []byte(`{"data":{"c":"3"}}`), metav1.PatchOptions{})
	if err != nil {
		return describe("patch", err)
	}
	if fmt.Sprint(patched.Data) != "map[a:1 b:2 c:3]" {
		return "patch: data " + fmt.Sprint(patched.Data)
	}
	list, err := api.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return describe("list", err)
	}
	if len(list.Items) != 1 || list.ResourceVersion == "" {
		return fmt.Sprintf("list: %d items", len(list.Items))
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	if _, err := api.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return describe("get after delete (want 404 NotFound)", err)
	}
	return ""
}

func secretCRUD(ctx context.Context, cfg *rest.Config, name string) string {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return describe("client", err)
	}
	api := c.CoreV1().Secrets(namespace)
	_, err = api.Create(ctx, &corev1.Secret{ObjectMeta: meta(name), StringData: map[string]string{"k": "v"}, Type: corev1.SecretTypeOpaque}, metav1.CreateOptions{})
	if err != nil {
		return describe("create", err)
	}
	got, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return describe("get", err)
	}
	if string(got.Data["k"]) != "v" {
		return fmt.Sprintf("get: data.k %q (stringData not merged)", got.Data["k"])
	}
	got.Data["k2"] = []byte("v2")
	if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return describe("update", err)
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	return ""
}

func leaseCRUD(ctx context.Context, cfg *rest.Config, name string) string {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return describe("client", err)
	}
	api := c.CoordinationV1().Leases(namespace)
	now := metav1.NowMicro()
	_, err = api.Create(ctx, &coordinationv1.Lease{ObjectMeta: meta(name), Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To("one"), LeaseDurationSeconds: ptr.To[int32](15), AcquireTime: &now, RenewTime: &now,
	}}, metav1.CreateOptions{})
	if err != nil {
		return describe("create", err)
	}
	got, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return describe("get", err)
	}
	if got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != "one" || got.Spec.RenewTime == nil {
		return "get: spec not kept"
	}
	got.Spec.HolderIdentity = ptr.To("two")
	updated, err := api.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		return describe("update", err)
	}
	if *updated.Spec.HolderIdentity != "two" {
		return "update: holder not changed"
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	return ""
}

// protobufResponse asks for protobuf only and reports the content type the server answers with.
func protobufResponse(ctx context.Context, e *env) string {
	cfg := rest.CopyConfig(e.protobuf)
	var contentType string
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				contentType = resp.Header.Get("Content-Type")
			}
			return resp, err
		})
	})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return describe("client", err)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return describe("get namespace", err)
	}
	if !strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf") {
		return "answered in " + strings.SplitN(contentType, ";", 2)[0]
	}
	return ""
}

func widget(name string, size int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "goclient.kbind.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"size": size, "color": "red"},
	}}
}

func dynamicCRUD(ctx context.Context, e *env) string {
	d, err := dynamic.NewForConfig(e.json)
	if err != nil {
		return describe("client", err)
	}
	api := d.Resource(widgetGVR).Namespace(namespace)
	if _, err := api.Create(ctx, widget("dyn", 1), metav1.CreateOptions{}); err != nil {
		return describe("create", err)
	}
	got, err := api.Get(ctx, "dyn", metav1.GetOptions{})
	if err != nil {
		return describe("get", err)
	}
	if got.GetGeneration() != 1 {
		return fmt.Sprintf("create: generation %d", got.GetGeneration())
	}
	if err := unstructured.SetNestedField(got.Object, int64(2), "spec", "size"); err != nil {
		return describe("set", err)
	}
	updated, err := api.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		return describe("update", err)
	}
	if updated.GetGeneration() != 2 {
		return fmt.Sprintf("update: generation %d", updated.GetGeneration())
	}
	patched, err := api.Patch(ctx, "dyn", types.MergePatchType, []byte(`{"spec":{"color":"blue"}}`), metav1.PatchOptions{})
	if err != nil {
		return describe("merge patch", err)
	}
	if color, _, _ := unstructured.NestedString(patched.Object, "spec", "color"); color != "blue" {
		return "merge patch: color " + color
	}
	if _, err := api.Patch(ctx, "dyn", types.StrategicMergePatchType, []byte(`{"spec":{"color":"green"}}`), metav1.PatchOptions{}); !apierrors.IsUnsupportedMediaType(err) {
		return describe("strategic merge patch on a custom resource (want 415)", err)
	}
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		return describe("list", err)
	}
	if len(list.Items) != 1 || list.GetKind() != "WidgetList" {
		return fmt.Sprintf("list: %d items of %s", len(list.Items), list.GetKind())
	}
	if err := api.Delete(ctx, "dyn", metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	if _, err := api.Get(ctx, "dyn", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return describe("get after delete (want 404 NotFound)", err)
	}
	return ""
}
