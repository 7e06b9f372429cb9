import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from qalib.topics.nb20_patches_as_tokens import compute as pc
from qalib.topics.nb20_patches_as_tokens import experiment as px


def test_digits_load_and_split():
    x, y = pc.load_digits()
    assert x.shape == (1797, 8, 8) and y.shape == (1797,)
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    assert set(y.tolist()) == set(range(10))
    s = pc.split()
    assert len(s.train_y) == 1300 and len(s.test_y) == pc.N_TEST
    assert s is pc.split()  # one fixed split


def test_patchify_round_trip_and_layout():
    img = torch.arange(64.0).reshape(1, 8, 8)
    t = pc.patchify(img, 2)
    assert t.shape == (1, 16, 4)
    assert t[0, 0].tolist() == [0, 1, 8, 9] and t[0, 1].tolist() == [2, 3, 10, 11]  # row-major patches
    assert t[0, 4].tolist() == [16, 17, 24, 25]  # the second row of patches
    for p in pc.PATCHES:
        assert torch.equal(pc.unpatchify(pc.patchify(img, p), p), img)
    assert pc.patchify(img, 1).shape == (1, 64, 1) and pc.patchify(img, 8).shape == (1, 1, 64)
    with pytest.raises(ValueError, match="tile"):
        pc.patchify(img, 3)
    with pytest.raises(ValueError):
        pc.patchify(torch.zeros(8, 8), 2)


def test_shuffle_patches_keeps_the_patches():
    x = pc.split().test_x[:5]
    g = torch.Generator().manual_seed(0)
    s = pc.shuffle_patches(x, 2, g)
    a, b = pc.patchify(x, 2), pc.patchify(s, 2)
    for i in range(5):  # the same multiset of patches
        assert sorted(map(tuple, a[i].tolist())) == sorted(map(tuple, b[i].tolist()))
    assert not torch.equal(s, x)
    assert torch.equal(pc.shuffle_patches(x, 8, g), x)  # one patch: nothing to shuffle


def test_sincos_2d_rows_and_columns():
    p = pc.sincos_2d(4, 16)
    assert p.shape == (16, 16)
    assert torch.equal(p[0, :8], p[3, :8])      # cells 0 and 3 share row 0: the first half
    assert torch.equal(p[0, 8:], p[4, 8:])      # cells 0 and 4 share column 0: the second half
    assert len({tuple(r.tolist()) for r in p}) == 16
    with pytest.raises(ValueError):
        pc.sincos_2d(4, 6)


def test_vit_config_validates_in_one_place():
    assert pc.ViTConfig().n_patches == 16 and pc.ViTConfig(patch=1).n_patches == 64
    for bad in ({"patch": 3}, {"pos": "rotary"}, {"d_model": 30, "pos": "sin2d", "n_heads": 2}, {"patch": 0},
                {"init_std": 0}):
        with pytest.raises(ValueError):
            pc.ViTConfig(**bad)
    enc = pc.ViTConfig(patch=4).encoder()
    assert enc.max_len == 5 and enc.pos == "none" and enc.norm_placement == "pre"


def test_vit_forward_shapes_attention_and_bag_of_patches():
    torch.manual_seed(0)
    x = pc.split().test_x[:6]
    for pos in pc.POSITIONS:
        m = pc.ViT(pc.ViTConfig(patch=2, pos=pos)).eval()
        assert m(x).shape == (6, 10)
        att = m.cls_attention(x)
        assert att.shape == (6, 2, 16) and torch.all(att >= 0) and torch.all(att.sum(-1) <= 1 + 1e-5)
    none = pc.ViT(pc.ViTConfig(patch=2, pos="none")).eval()
    shuffled = pc.shuffle_patches(x, 2, torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(none(x), none(shuffled), atol=1e-5)  # a bag of patches
        learned = pc.ViT(pc.ViTConfig(patch=2, pos="learned")).eval()
        assert not torch.allclose(learned(x), learned(shuffled), atol=1e-5)
    with pytest.raises(ValueError):
        none(torch.zeros(2, 4, 4))
    with pytest.raises(TypeError):
        pc.ViT("not a config")


def test_cnn_and_parameter_counts_are_close():
    cnn, vit = pc.SmallCNN(), pc.ViT(pc.ViTConfig())
    assert cnn(torch.zeros(3, 8, 8)).shape == (3, 10)
    assert abs(pc.n_params(cnn) / pc.n_params(vit) - 1) < 0.1


def test_costs():
    assert pc.n_tokens(224, 16) == 197 and pc.n_tokens(224, 16, cls=False) == 196
    assert pc.n_tokens(8, 1) == 65
    with pytest.raises(ValueError):
        pc.n_tokens(224, 15)
    c = pc.layer_cost(197, 768)
    assert c["scores"] / (c["projections"] + c["ffn"]) == pytest.approx(197 / (6 * 768))
    assert pc.step_ms(pc.ViTConfig(patch=8), batch_size=8, repeats=1) > 0


def test_grid_similarity():
    assert pc.grid_neighbours(3).sum() == 2 * 2 * 3 * 2  # 12 edges, both directions
    assert pc.grid_similarity(pc.sincos_2d(4, 32)) > 0.05  # the sinusoid has the grid built in
    g = torch.Generator().manual_seed(0)
    assert abs(pc.grid_similarity(torch.randn(64, 256, generator=g))) < 0.02
    with pytest.raises(ValueError):
        pc.grid_similarity(torch.randn(4, 8))


def test_patch_view_and_cost_view_plot():
    torch.manual_seed(0)
    models = {2: pc.ViT(pc.ViTConfig(patch=2)).eval(), 8: pc.ViT(pc.ViTConfig(patch=8)).eval()}
    v = pc.patch_view(models, index=3, patch=2, layer=1)
    assert v["tokens"] == 17 and v["scores"] == 289 and v["attention"].shape == (8, 8)
    fig = plt.figure()
    update = pc.plot_patches(fig, v)
    update(pc.patch_view(models, index=496, patch=8, layer=2))
    plt.close(fig)
    with pytest.raises(ValueError, match="no trained model"):
        pc.patch_view(models, patch=4)
    with pytest.raises(ValueError):
        pc.patch_view(models, index=497)
    c = pc.cost_view(image=224, patch=16, d=768)
    assert c["patch"] == 16 and c["n"][c["i"]] == 197 and c["pixel_scores"] == (224 * 224 + 1) ** 2
    assert pc.cost_view(image=224, patch=13)["patch"] == 14  # the nearest size that tiles the image
    fig = plt.figure()
    update = pc.plot_costs(fig, c)
    update(pc.cost_view(image=8, patch=64, d=4096))
    update(pc.cost_view(image=1024, patch=1, d=64))
    plt.close(fig)


def test_position_view_and_plot():
    torch.manual_seed(0)
    model = pc.ViT(pc.ViTConfig(patch=2)).eval()
    v = pc.position_view(model, cell=5, table="trained")
    assert v["map"].shape == (4, 4) and v["map"][1, 1] == pytest.approx(1.0, abs=1e-5)
    assert pc.position_view(model, cell=5, table="untrained")["map"] == pytest.approx(v["map"])  # seed 0 at init
    sin = pc.position_view(model, cell=0, table="2-D sinusoid")
    assert sin["score"] == pytest.approx(pc.grid_similarity(pc.sincos_2d(4, 32)))
    fig = plt.figure()
    update = pc.plot_positions(fig, v)
    assert update(pc.position_view(model, cell=15, table="2-D sinusoid")) is None
    plt.close(fig)
    with pytest.raises(ValueError):
        pc.position_view(model, cell=16)
    with pytest.raises(ValueError):
        pc.position_view(pc.ViT(pc.ViTConfig(patch=2, pos="none")))


def test_variant_setup_gate_and_one_short_run():
    assert px.Variant().name == "ViT 2x2, learned 1-D, 1300 images"
    assert px.Variant("cnn", n_train=100).name == "CNN, 100 images"
    for bad in ({"patch": 3}, {"pos": "alibi"}, {"model": "mlp"}, {"n_train": 5000}):
        with pytest.raises(ValueError):
            px.Variant(**bad)
    assert px.PatchSetup().scaled(4).steps == 4 * px.PatchSetup().steps
    assert px.gate(0.5).passed and not px.gate(0.25).passed
    model, out, seen = px.train_variant(px.Variant(patch=4), 0, px.PatchSetup(steps=20), checkpoints=(10,))
    assert 0 <= out.accuracy <= 1 and math.isnan(out.grid) and set(seen) == {10}
    model2, out2, _ = px.train_variant(px.Variant(patch=4), 0, px.PatchSetup(steps=20))
    assert out2.accuracy == out.accuracy  # seeded: the same run


def test_reference_claims_read_every_metric():
    names = [v.name for v in px.REFERENCE_VARIANTS]
    assert len(set(names)) == len(names)
    assert set(px.NAMES.values()) == set(names)
    assert np.isfinite(px.CHANCE + px.GATE_MARGIN)
