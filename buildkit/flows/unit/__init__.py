"""One build unit, start to end: prepare (pipeline), build spec, build, verify, lock entry, tests image, publish."""
