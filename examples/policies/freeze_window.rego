# No change on Fridays from 16:00 UTC, nor on the listed freeze days; looking (check) and
# extending a lease are always allowed. Times come from `input.now_ns` (the planner's clock).
package muster.freeze_window

import rego.v1

freeze_days := {"2026-12-24", "2026-12-25", "2026-12-31"}

harmless := {"check", "extend-lease", "pause", "resume", "cancel", "reject"}

today := sprintf("%04d-%02d-%02d", time.date(input.now_ns))

friday_evening if {
	time.weekday(input.now_ns) == "Friday"
	[hour, _, _] := time.clock(input.now_ns)
	hour >= 16
}

deny contains msg if {
	not input.operation in harmless
	friday_evening
	msg := sprintf("changes are frozen on Friday evenings (from 16:00 UTC): %s refused", [input.operation])
}

deny contains msg if {
	not input.operation in harmless
	today in freeze_days
	msg := sprintf("%s is a freeze day: %s refused", [today, input.operation])
}
