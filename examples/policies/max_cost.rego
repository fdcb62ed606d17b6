# A cluster costs at most 2.00 an hour (the catalog's hardware `cost` fields); warn past 1.00.
package muster.max_cost

import rego.v1

deny contains msg if {
	input.cost.per_hour > 2
	msg := sprintf("this cluster would cost %.2f an hour; the limit is 2.00", [input.cost.per_hour])
}

warn contains msg if {
	input.cost.per_hour > 1
	input.cost.per_hour <= 2
	msg := sprintf("this cluster would cost %.2f an hour", [input.cost.per_hour])
}
