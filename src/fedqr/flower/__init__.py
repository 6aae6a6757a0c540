"""FedSGD-DPC on Flower: real clients and a real server, the engine's privacy and arithmetic.

The only package of fedqr that imports ``flwr`` (the optional ``[flower]`` extra), and only in
the modules that need it:

- :mod:`fedqr.flower.client_app` and :mod:`fedqr.flower.server_app`: the Flower ``ClientApp``
  and ``ServerApp`` (Message API), loaded by Flower from the app's ``pyproject.toml``;
- :mod:`fedqr.flower.launch`: a SuperLink and SuperNodes on 127.0.0.1, ``flwr run``;
- :mod:`fedqr.flower.cli`: ``fedqr flower simulate`` and ``fedqr flower deploy``.

The rest is plain fedqr: :mod:`~fedqr.flower.config` (the run configuration),
:mod:`~fedqr.flower.client_logic` (one client's reply, computed with the engine's functions),
:mod:`~fedqr.flower.client_state` (the ledger persisted on the client's disk) and
:mod:`~fedqr.flower.server_logic` (round robin, aggregation, evaluation, ``result.json``).
"""

# Nothing is imported here: a deployed ClientApp starts a fresh process for every message, and
# its query handler must not pay for torch and dp-accounting.
