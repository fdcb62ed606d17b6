# Only these hardware and image types, on every node the cluster will have.
package muster.allowed_hardware_images

import rego.v1

hardware := ["medium", "small"]

images := ["centos7", "ubuntu22"]

deny contains msg if {
	some group in input.layout
	not group.hardwaretype in hardware
	msg := sprintf("hardware type %s is not allowed (allowed: %v)", [group.hardwaretype, hardware])
}

deny contains msg if {
	some group in input.layout
	not group.imagetype in images
	msg := sprintf("image type %s is not allowed (allowed: %v)", [group.imagetype, images])
}
