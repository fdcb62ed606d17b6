# At most 40 nodes in the whole tenant, and at most 20 in one cluster; a warning past 30.
# `input.tenant.nodes` counts the nodes of the tenant's clusters that are not deleted, before
# this request; `input.nodes.before` / `.after` are this cluster's (docs/governance.md).
# Only a request that adds nodes is judged: a check, a stop, a shrink or a delete of a tenant
# over its limit (a limit lowered since) is neither refused nor warned of.
package muster.nodes_per_tenant

import rego.v1

tenant_limit := 40

cluster_limit := 20

after := (input.tenant.nodes - input.nodes.before) + input.nodes.after

grows if input.nodes.after > input.nodes.before

deny contains msg if {
	grows
	after > tenant_limit
	msg := sprintf("tenant %s would have %d nodes; its limit is %d", [input.tenant.name, after, tenant_limit])
}

deny contains msg if {
	grows
	input.nodes.after > cluster_limit
	msg := sprintf("a cluster has at most %d nodes; this one would have %d", [cluster_limit, input.nodes.after])
}

warn contains msg if {
	grows
	after > 30
	after <= tenant_limit
	msg := sprintf("tenant %s would have %d of its %d nodes", [input.tenant.name, after, tenant_limit])
}
