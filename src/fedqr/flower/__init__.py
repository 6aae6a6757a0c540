"""FedSGD-DPC on Flower: real clients and a real server, the engine's privacy and arithmetic.

The only package of fedqr that imports ``flwr`` (the optional ``[flower]`` extra), and only in
the modules that need it:

- :mod:`fedqr.flower.client_app` and :mod:`fedqr.flower.server_app`: the Flower ``ClientApp``
  and ``ServerApp`` (Message API), loaded by Flower from the app's ``pyproject.toml``;
- :mod:`fedqr.flower.node_main`: fedqr's SuperNode process (Flower's SuperNode with a
  long-running ClientApp, ``--isolation process``);
- :mod:`fedqr.flower.link_main`: fedqr's SuperLink process (Flower's SuperLink with a
  configurable node expiry);
- :mod:`fedqr.flower.launch`: a SuperLink and SuperNodes on 127.0.0.1, ``flwr run``;
- :mod:`fedqr.flower.cli` and :mod:`fedqr.flower.cli_parties`: ``fedqr flower simulate``,
  ``deploy``, ``run``, ``certs``, ``superlink``, ``supernode`` and ``register``.

The rest is plain fedqr: :mod:`~fedqr.flower.config` (the run configuration),
:mod:`~fedqr.flower.client_logic` (one client's reply, computed with the engine's functions),
:mod:`~fedqr.flower.client_data` (its rows and model, loaded once per process),
:mod:`~fedqr.flower.auto` (``--rounds auto``: a plan from the clients' reported sizes and
budgets),
:mod:`~fedqr.flower.client_state` (the ledger persisted on the client's disk) and
:mod:`~fedqr.flower.server_logic` (round robin, aggregation, evaluation, ``result.json``),
:mod:`~fedqr.flower.own_data` (a client with its own data file and budget),
:mod:`~fedqr.flower.parts` (the parties' command lines and start-up checks),
:mod:`~fedqr.flower.certs` (CA, TLS certificate, node keys), :mod:`~fedqr.flower.procs`
(process trees) and :mod:`~fedqr.flower.guard`
(a process group that dies with its starter). See docs/deployment.md.
"""

# Nothing is imported here: ``fedqr flower`` must work without the [flower] extra, and the
# guard process must start fast.
