"""One verify run: the HF reference and the port runner, probe by probe."""

from __future__ import annotations

from mmport.errors import one_line
from mmport.verify.checks import check_cache, check_fields, check_placeholders, check_tokens
from mmport.verify.probes import MAX_PROBE_ITEMS, Probe, make_image
from mmport.verify.reference import HFReference
from mmport.verify.report import CheckResult, Failure

__all__ = ["Session"]

# Items asked of the port's dummy builder, and the item count probed for
# "unlimited" when a port declares no limit.
DUMMY_ITEMS = 2
UNLIMITED_PROBE = 3
DUMMY_SEQ_LEN = 1 << 16


class Session:
    """Runs probes through both sides and feeds the checks."""

    def __init__(self, hf: HFReference, runner, model_check=None) -> None:
        self.hf = hf
        self.runner = runner
        self.model_check = model_check  # a ModelCheck with --model, else None
        self.max_count = 0
        self.outside_contract: list[str] = []  # probes HF answers in a way vLLM cannot hold

    def max_probe_items(self) -> int:
        """Items per probe: up to :data:`MAX_PROBE_ITEMS`, within the port's declared limit.

        Probes beyond the limit are never compared (``check_limits`` judges the
        limit itself), so a one-image port draws its probes among one-image prompts.
        """
        limit = self.runner.supported_mm_limits().get("image")
        return MAX_PROBE_ITEMS if limit is None else max(1, min(MAX_PROBE_ITEMS, limit))

    def _port(self, prompt: str, images: list):
        return self.runner.process(prompt, {"image": images} if images else {})

    def run_probe(self, probe: Probe, checks: dict[str, CheckResult]) -> None:
        """Run one probe through HF and the port and apply the per-probe checks."""
        prompt, images = probe.prompt(self.hf.placeholder), probe.images()
        limit = self.runner.supported_mm_limits().get("image")
        if limit is not None and len(images) > limit:
            return  # beyond the port's declared limit: check_limits judges that limit
        try:
            expected = self.hf.run(prompt, images)
            singles = [self.hf.single(image) for image in images]  # HF on each item alone
        except Exception:  # HF rejects this input (or an item alone): nothing to compare against
            return
        counts = [single.input_ids.count(self.hf.embed_id) for single in singles]
        if 0 in counts:
            # HF expands this item to nothing; vLLM needs at least one position per item,
            # so no port can represent the probe. Say so rather than fail every port.
            w, h = images[counts.index(0)].size
            self.outside_contract.append(f"{probe.name} (HF gives a {w}×{h} image no embedding positions)")
            return
        self.max_count = max(self.max_count, *counts, 0)  # each item as HF counts it alone: what vLLM must hold
        together = expected.input_ids.count(self.hf.embed_id)
        in_company = len(images) > 1 and together != sum(counts)
        if in_company:
            # HF counts an item differently when others share its prompt; vLLM processes
            # (and caches) each item alone, so no port can match HF on this probe.
            alone = "+".join(map(str, counts))
            self.outside_contract.append(
                f"{probe.name} (HF gives its {len(images)} images {together} embedding positions together, {alone} alone)"
            )
        try:
            actual = self._port(expected.prompt, images)
        except Exception as exc:
            checks["tokens"].runs += 1
            checks["tokens"].failures.append(Failure(probe.name, f"the port raised {one_line(exc)}"))
            return
        if not in_company:
            self._compare(probe, checks, expected, singles, counts, actual)
        if len(images) > 1:
            # The port alone, whatever HF does: vLLM's cache needs its items independent.
            self._check_cache(probe, checks["cache"], singles, images, actual)

    def _compare(self, probe: Probe, checks: dict[str, CheckResult], expected, singles: list, counts: list[int], actual) -> None:
        """The port's answer against HF's: tokens, then (with images) placeholders and fields."""
        check_tokens(checks["tokens"], probe.name, expected.input_ids, actual.prompt_token_ids)
        if self.model_check is not None:
            self.model_check.run_probe(probe.name, singles, expected, actual)
        if not singles:
            return
        placeholders = actual.placeholders.get("image", [])
        check_placeholders(checks["placeholders"], probe.name, expected.input_ids, self.hf.embed_id, counts, placeholders)
        check_fields(checks["fields"], probe.name, expected.mm, [s.mm for s in singles], actual.items.get("image", []))

    def _check_cache(self, probe: Probe, result: CheckResult, singles: list, images: list, actual) -> None:
        try:
            alone = [self._port(single.prompt, [image]) for single, image in zip(singles, images)]
        except Exception as exc:
            result.runs += 1
            result.failures.append(Failure(probe.name, f"the port raised on one item alone: {one_line(exc)}"))
            return
        check_cache(result, probe.name, actual, alone)

    def report_uncompared(self, tokens: CheckResult, placeholders: CheckResult) -> None:
        """Name the probes left out as unholdable; fail ``tokens`` if that left no probe with images."""
        if not self.outside_contract:
            return
        tokens.summary = "not compared, vLLM cannot hold them: " + "; ".join(self.outside_contract)
        if placeholders.runs == 0:
            message = "no probe with images could be compared (where HF gives every image no embedding positions, the snapshot's tokenizer may lack the image token)"
            tokens.failures.append(Failure("probes", message))

    def check_dummy(self, result: CheckResult) -> None:
        """The port's dummy inputs reach the largest count HF produced."""
        limit = self.runner.supported_mm_limits().get("image")
        wanted = min(DUMMY_ITEMS, limit) if limit is not None else DUMMY_ITEMS
        result.runs += 1
        try:
            text, data = self.runner.dummy(DUMMY_SEQ_LEN, {"image": wanted})
            output = self.runner.dummy_output(DUMMY_SEQ_LEN, {"image": wanted})
        except Exception as exc:
            result.failures.append(Failure("dummy", f"the port's dummy inputs fail: {one_line(exc)}"))
            return
        images = data.get("image", [])
        if len(images) != wanted:
            result.failures.append(Failure("dummy", "dummy image count for mm_counts", None, str(wanted), str(len(images))))
            return
        embeds = [ph.num_embeds for ph in output.placeholders.get("image", [])]
        if min(embeds, default=0) < self.max_count:
            message = "dummy item placeholders are below the largest count seen over the probes (worst case)"
            result.failures.append(Failure("dummy", message, None, str(self.max_count), str(min(embeds, default=0))))
            return
        self._check_dummy_against_hf(result, text, images, embeds)

    def _check_dummy_against_hf(self, result: CheckResult, text: str, images: list, embeds: list[int]) -> None:
        try:
            hf_ids = self.hf.run(text, images).input_ids
        except Exception as exc:
            result.failures.append(Failure("dummy", f"HF rejects the port's dummy text and images: {one_line(exc)}"))
            return
        # What vLLM must give: each item as HF counts it alone (the same as HF's count
        # for the whole prompt, unless HF counts an item differently in company).
        alone = sum(self.hf.item_count(image) for image in images)
        if alone != sum(embeds):
            message = "embedding positions for the dummy inputs"
            result.failures.append(Failure("dummy", message, None, str(alone), str(sum(embeds))))

    def check_limits(self, result: CheckResult) -> None:
        """HF accepts as many items as the port's declared limit allows."""
        limit = self.runner.supported_mm_limits().get("image")
        count = limit if limit is not None else UNLIMITED_PROBE
        result.runs += 1
        images = [make_image(32, 32, i) for i in range(count)]
        prompt = (self.hf.placeholder or "") * count + " limits"
        try:
            prompt = self.hf.run(prompt, images).prompt
        except Exception as exc:
            message = f"the port allows {'any number of' if limit is None else limit} images but HF rejects {count}: {one_line(exc)}"
            result.failures.append(Failure("limits", message))
            return
        try:
            self._port(prompt, images)
        except Exception as exc:
            result.failures.append(Failure("limits", f"the port rejects {count} images within its own limit: {one_line(exc)}"))
            return
        if limit is not None:
            self._check_limit_is_needed(result, limit)

    def _check_limit_is_needed(self, result: CheckResult, limit: int) -> None:
        """HF must not expand one more item than the port's limit on its own.

        A processor that takes more images but gives them no more embedding
        positions (BLIP-2's one block per prompt) does not support them.
        """
        images = [make_image(32, 32, i) for i in range(limit + 1)]
        try:
            ids = self.hf.run((self.hf.placeholder or "") * len(images), images).input_ids
        except Exception:
            return  # HF rejects them too: the limit holds
        expanded = sum(self.hf.item_count(image) for image in images)
        if ids.count(self.hf.embed_id) == expanded:
            message = f"the port allows {limit} image(s) but HF expands each of {limit + 1}"
            result.failures.append(Failure("limits", message))
