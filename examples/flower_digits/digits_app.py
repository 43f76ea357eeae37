"""FedAvg on digits under local DP (ldp-audit): the apps `flwr run` loads."""

from ldp_audit.training.flower.digits import make_client_app, make_server_app

client_app = make_client_app()  # mods=[LdpReleaseMod()]: every update leaves under LDP
server_app = make_server_app()  # FedAvg over sealed releases; writes the run directory
