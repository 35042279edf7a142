"""Serve a trace directory in the xprof UI on one address (``python -m harness.trace.serve``).

``python -m xprof.server`` binds every interface, web UI and gRPC worker service alike (a fixed
gRPC port, 50051, so two servers collide). This entry point builds the same web app from
xprof's own parts and binds it to the host it is given (loopback by default in ``harness
view``), without the gRPC worker service: the standalone UI converts traces in-process.

    python -m harness.trace.serve LOGDIR HOST PORT
"""
from __future__ import annotations

import sys


def serve(logdir: str, host: str, port: int) -> None:
    from xprof import server as xs

    try:
        context = xs.TBContext(logdir, xs.DataProvider(logdir), xs.TBContext.Flags(False))
        context.hide_capture_profile_button = True
        context.enable_tab_name_label = False
        context.src_prefix = None
        plugin = xs.ProfilePluginLoader().load(context)
        run = xs.run_server
    except AttributeError as e:  # an xprof whose server module is laid out otherwise
        sys.exit(f"harness view: error: this xprof cannot be bound to one address ({e}); "
                 "install xprof 2.20 to 2.24")
    run(plugin, host, port)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
