"""``harness predict serve`` and ``harness predict speculative``: two of ``harness predict``'s
questions (``harness.commands.predict.QUESTIONS``), the serving plan from the book's arithmetic
(``harness.plan.serving``; docs/serving.md).

    harness predict serve --model llama3-70b --chip tpu-v5e --context 8192 --generate 512
    harness predict serve --model llama3-70b --chip tpu-v5e --prompt 1024 --generate 512 \
        --int8 --latency 0.015 --price 1.2
    harness predict speculative --acceptance 0.8 --draft-tokens 4 --draft-cost 0.05
"""
from __future__ import annotations

from harness.commands.answers import emit, num
from harness.units import json_text
from predictions import hardware, transformer


def _serve(args) -> int:
    from harness.plan.serving import Serve, serve

    chip, cfg = hardware.chip_entry(args.chip), transformer.model(args.model)
    context, g = num("context", args.context), num("generate", args.generate)
    prompt = num("prompt", args.prompt)
    if prompt is None and context is None:
        raise ValueError("give --prompt (tokens a query brings) or --context (tokens cached "
                         "per sequence: the prompt is then --context minus --generate)")
    prompt = context - g if prompt is None else prompt
    if prompt <= 0:
        raise ValueError(f"--context {context:g} leaves no prompt after --generate {g:g}")
    precs = ("int4",) if args.int4 else ("int8",) if args.int8 else None
    q = Serve(prompt, g, context, num("num-chips", args.chips, True),
              num("batch", args.batch, True), precs or Serve.precisions, num("mfu", args.mfu),
              num("latency", args.latency), num("price", args.price), args.dtype)
    answers, front = serve(chip, cfg, args.model, q)
    if args.format == "json":
        print(json_text(answers.data, indent=2))
        return 0
    emit(args, answers)
    return emit(args, front)


def add_serve(sub, common) -> None:
    p = sub.add_parser("serve", parents=[common],
                       help="serving plan: frontier over batch, QPS, TTFT, slices, cost "
                            "(applied-inference.md)")
    p.add_argument("--model", required=True, metavar="NAME",
                   help=f"one of {', '.join(transformer.MODELS)}")
    p.add_argument("--chip", required=True, metavar="CHIP",
                   help=f"one of {', '.join(hardware.CHIPS)}")
    p.add_argument("--num-chips", dest="chips", metavar="N",
                   help="number of chips (default each precision's smallest slice)")
    p.add_argument("--dtype", default="bf16", metavar="DTYPE",
                   help="compute dtype (default bf16)")
    p.add_argument("--prompt", metavar="N", help="p, prompt tokens a query brings")
    p.add_argument("--generate", default="512", metavar="N",
                   help="g, tokens generated a query (default 512, the book's median)")
    p.add_argument("--context", metavar="N",
                   help="cached tokens per sequence (default prompt + generate)")
    p.add_argument("--batch", metavar="N",
                   help="one batch of sequences (default: 1, 2, 4, ... up to the largest "
                        "that fits)")
    p.add_argument("--mfu", default="0.5", metavar="FRACTION",
                   help="prefill FLOPs utilisation for time to first token (default 0.5)")
    p.add_argument("--latency", metavar="S",
                   help="a per-token latency target in seconds: the smallest slice meeting it")
    p.add_argument("--price", metavar="USD",
                   help="dollars per chip-hour, for cost per million tokens (none built in; "
                        "the book's example: v5e $1.2)")
    p.add_argument("--int8", action="store_true", help="int8 weights and KV cache only")
    p.add_argument("--int4", action="store_true", help="int4 weights and KV cache only")
    p.set_defaults(_run=_serve)


def _speculative(args) -> int:
    from harness.plan.serving import speculative

    return emit(args, speculative(num("acceptance", args.acceptance),
                                   num("draft-tokens", args.draft_tokens, True),
                                   num("draft-cost", args.draft_cost)))


def add_speculative(sub, common) -> None:
    p = sub.add_parser("speculative", parents=[common],
                       help="speculative sampling: tokens per step and speedup")
    p.add_argument("--acceptance", required=True, metavar="FRACTION",
                   help="alpha, the chance each draft token is accepted")
    p.add_argument("--draft-tokens", required=True, metavar="N",
                   help="gamma, tokens the drafter proposes per step")
    p.add_argument("--draft-cost", default="0", metavar="FRACTION",
                   help="c, a drafter step's time over the target model's (default 0)")
    p.set_defaults(_run=_speculative)
