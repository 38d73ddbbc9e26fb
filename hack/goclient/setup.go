package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// setup creates the namespace and the Widget CRD every case uses, and waits until it is Established.
func setup(ctx context.Context, e *env) error {
	_, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace: %w", err)
	}
	ext, err := apiextensions.NewForConfig(e.json)
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.goclient.kbind.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "goclient.kbind.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size":  {Type: "integer"},
							"color": {Type: "string"},
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"observed": {Type: "integer"},
							"phase":    {Type: "string"},
						}},
					},
				}},
			}},
		},
	}
	_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("crd: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if out := waitFor(wctx, "crd established", func() string {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(wctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return describe("get crd", err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return ""
			}
		}
		return "not established"
	}); out != "" {
		return fmt.Errorf("%s", out)
	}
	// Why: Established does not mean the discovery documents list it yet; the RESTMapper cases need that.
	out := waitFor(wctx, "widgets discovered", func() string {
		list, err := e.client.Discovery().ServerResourcesForGroupVersion("goclient.kbind.dev/v1")
		if err != nil {
			return describe("discovery", err)
		}
		for _, r := range list.APIResources {
			if r.Name == "widgets" {
				return ""
			}
		}
		return "not listed"
	})
	if out != "" {
		return fmt.Errorf("%s", out)
	}
	return nil
}
