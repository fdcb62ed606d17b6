# A cluster whose lease still runs is not deleted by hand: let the lease end (or shorten it).
package muster.no_delete_with_lease

import rego.v1

deny contains msg if {
	input.operation == "delete"
	expires := input.cluster.lease_expires_at
	expires != null
	time.parse_rfc3339_ns(expires) > input.now_ns
	msg := sprintf("cluster %s has a lease until %s: it is not deleted before then", [input.cluster.name, expires])
}
