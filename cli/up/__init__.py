"""`ketch up`: the supervisor of a local cluster (`supervisor`), each child's state machine
(`child`), the command line and ports (`options`) and the control socket (`control`). The data
layout and the nodes' command lines are node/layout.py's, shared with testkit's process cluster."""
