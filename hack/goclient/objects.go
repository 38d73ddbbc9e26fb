package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
)

// ssaConflict applies one field from two field managers: the second must get a 409 Conflict
// naming the first manager and the field.
func ssaConflict(ctx context.Context, e *env) string {
	api := e.client.CoreV1().ConfigMaps(namespace)
	first := corev1apply.ConfigMap("applied", namespace).WithData(map[string]string{"owned": "by-alpha"})
	if _, err := api.Apply(ctx, first, metav1.ApplyOptions{FieldManager: "alpha"}); err != nil {
		return describe("apply alpha", err)
	}
	second := corev1apply.ConfigMap("applied", namespace).WithData(map[string]string{"owned": "by-beta"})
	_, err := api.Apply(ctx, second, metav1.ApplyOptions{FieldManager: "beta"})
	if !apierrors.IsConflict(err) {
		return describe("apply beta (want 409 Conflict)", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `"alpha"`) || !strings.Contains(msg, ".data.owned") {
		return "conflict message does not name manager alpha and .data.owned"
	}
	return ""
}

// ssaForce takes the field over with force: the value changes and alpha no longer manages it.
func ssaForce(ctx context.Context, e *env) string {
	api := e.client.CoreV1().ConfigMaps(namespace)
	second := corev1apply.ConfigMap("applied", namespace).WithData(map[string]string{"owned": "by-beta"})
	got, err := api.Apply(ctx, second, metav1.ApplyOptions{FieldManager: "beta", Force: true})
	if err != nil {
		return describe("apply beta with force", err)
	}
	if got.Data["owned"] != "by-beta" {
		return "data.owned " + got.Data["owned"]
	}
	var managers []string
	for _, m := range got.ManagedFields {
		managers = append(managers, fmt.Sprintf("%s/%s", m.Manager, m.Operation))
	}
	sort.Strings(managers)
	// alpha owned only data.owned, so it drops out of managedFields entirely.
	if strings.Join(managers, ",") != "beta/Apply" {
		return "managers " + strings.Join(managers, ",")
	}
	if err := api.Delete(ctx, "applied", metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	return ""
}

// statusSubresource: a status update leaves spec alone, a spec update leaves status alone, and
// only spec changes bump the generation.
func statusSubresource(ctx context.Context, e *env) string {
	d, err := dynamic.NewForConfig(e.json)
	if err != nil {
		return describe("client", err)
	}
	api := d.Resource(widgetGVR).Namespace(namespace)
	w := widget("status", 1)
	w.Object["status"] = map[string]any{"phase": "ignored-on-create"}
	created, err := api.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		return describe("create", err)
	}
	var facts []string
	if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "status"); found {
		facts = append(facts, "create kept status")
	}
	_ = unstructured.SetNestedField(created.Object, int64(9), "spec", "size")
	_ = unstructured.SetNestedField(created.Object, "Ready", "status", "phase")
	afterStatus, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return describe("update status", err)
	}
	if size, _, _ := unstructured.NestedInt64(afterStatus.Object, "spec", "size"); size != 1 {
		facts = append(facts, fmt.Sprintf("status update changed spec.size to %d", size))
	}
	if phase, _, _ := unstructured.NestedString(afterStatus.Object, "status", "phase"); phase != "Ready" {
		facts = append(facts, "status update left phase "+phase)
	}
	if afterStatus.GetGeneration() != 1 {
		facts = append(facts, fmt.Sprintf("status update made generation %d", afterStatus.GetGeneration()))
	}
	_ = unstructured.SetNestedField(afterStatus.Object, int64(5), "spec", "size")
	_ = unstructured.SetNestedField(afterStatus.Object, "Lost", "status", "phase")
	afterSpec, err := api.Update(ctx, afterStatus, metav1.UpdateOptions{})
	if err != nil {
		return describe("update", err)
	}
	if size, _, _ := unstructured.NestedInt64(afterSpec.Object, "spec", "size"); size != 5 {
		facts = append(facts, fmt.Sprintf("spec update left spec.size %d", size))
	}
	if phase, _, _ := unstructured.NestedString(afterSpec.Object, "status", "phase"); phase != "Ready" {
		facts = append(facts, "spec update changed phase to "+phase)
	}
	if afterSpec.GetGeneration() != 2 {
		facts = append(facts, fmt.Sprintf("spec update made generation %d", afterSpec.GetGeneration()))
	}
	// A status patch through the subresource, as controller-runtime's Status().Patch sends it.
	patched, err := api.Patch(ctx, "status", types.MergePatchType, []byte(`{"status":{"observed":5},"spec":{"size":7}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		return describe("patch status", err)
	}
	if size, _, _ := unstructured.NestedInt64(patched.Object, "spec", "size"); size != 5 {
		facts = append(facts, fmt.Sprintf("status patch changed spec.size to %d", size))
	}
	if err := api.Delete(ctx, "status", metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	return strings.Join(facts, "; ")
}

// finalizers: a delete with a finalizer only marks the object; removing the finalizer removes it.
func finalizers(ctx context.Context, e *env) string {
	api := e.client.CoreV1().ConfigMaps(namespace)
	cm := &corev1.ConfigMap{ObjectMeta: meta("finalized")}
	cm.Finalizers = []string{"goclient.kbind.dev/hold"}
	if _, err := api.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return describe("create", err)
	}
	if err := api.Delete(ctx, "finalized", metav1.DeleteOptions{}); err != nil {
		return describe("delete", err)
	}
	held, err := api.Get(ctx, "finalized", metav1.GetOptions{})
	if err != nil {
		return describe("get after delete (want it held)", err)
	}
	if held.DeletionTimestamp == nil {
		return "held without deletionTimestamp"
	}
	// Why: a terminating object accepts no new finalizers; a real server answers 422 Invalid.
	held.Finalizers = append(held.Finalizers, "goclient.kbind.dev/late")
	if _, err := api.Update(ctx, held, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		return describe("adding a finalizer while terminating (want 422 Invalid)", err)
	}
	if _, err := api.Patch(ctx, "finalized", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		return describe("remove finalizer", err)
	}
	return waitFor(ctx, "gone", func() string {
		_, err := api.Get(ctx, "finalized", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		return describe("get", err)
	})
}
