"""A controller process: `ControllerNode` (node.py) runs the controller actor over its metadata
log and serves the controller's APIs; `main` is `ketch controller`."""
