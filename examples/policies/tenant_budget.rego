# The tenant's clusters together cost at most 5.00 an hour; warn past 80% of it.
# `input.tenant.per_hour` is what the tenant's clusters cost before this request (today's
# catalog prices); `input.cost.before_per_hour` / `.per_hour` are this cluster's before and
# after it, so a shrink or a delete that gets the tenant back under its budget is never refused;
# only a request that adds cost is judged (a check or a stop was warned of the tenant's spend).
package muster.tenant_budget

import rego.v1

budget := 5

after := (input.tenant.per_hour - input.cost.before_per_hour) + input.cost.per_hour

grows if input.cost.per_hour > input.cost.before_per_hour

deny contains msg if {
	grows
	after > budget
	msg := sprintf("tenant %s would spend %.2f an hour; its budget is %.2f", [input.tenant.name, after, budget])
}

warn contains msg if {
	grows
	after > budget * 0.8
	after <= budget
	msg := sprintf("tenant %s would spend %.2f of its %.2f an hour", [input.tenant.name, after, budget])
}
