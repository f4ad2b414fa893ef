# dtensor: python/examples/train_llama.py (simulated world: python3 train_llama.py;
# MPI: mpirun -np 4 python3 train_llama.py)
import math

import dtensor as torch
import dtensor.nn as nn
import dtensor.nn.functional as F
import dtensor.checkpoint as dcp
from dtensor.checkpoint.state_dict import get_state_dict, set_state_dict
from dtensor import init_device_mesh, Shard, Replicate
from dtensor.parallel import (parallelize_module, ColwiseParallel, RowwiseParallel, fully_shard,
                              loss_parallel)

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH, STEPS = 64, 32, 4, 2, 16, 4, 6


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, DIM // HEADS).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, DIM // HEADS).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, DIM // HEADS).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.w1 = nn.Linear(DIM, hidden, bias=False)
        self.w2 = nn.Linear(hidden, DIM, bias=False)
        self.w3 = nn.Linear(DIM, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward(4 * DIM)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def batches(steps):  # a DataLoader's loop: every rank draws the same global batches
    torch.manual_seed(1)
    for _ in range(steps):
        data = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
        yield data[:, :-1], data[:, 1:]


def main():
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Transformer()
    parallelize_module(model, mesh["tp"], {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate()),
        "output": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    })
    for block in model.layers:
        parallelize_module(block, mesh["tp"], {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
        })
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-3, betas=(0.9, 0.95))
    warmup = 2
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup
        else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (STEPS - warmup))))

    for step, (tokens, labels) in enumerate(batches(STEPS)):
        tokens = tokens.chunk(mesh["dp"].size())[mesh["dp"].get_local_rank()]
        labels = labels.chunk(mesh["dp"].size())[mesh["dp"].get_local_rank()]
        opt.zero_grad()
        with loss_parallel():
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1))
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        sched.step()
        print(f"step {step} loss {loss.item():.4f} grad norm {norm.item():.4f} lr {sched.get_last_lr()[0]:.5f}")

    ck = f"checkpoint/step-{STEPS}"
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=ck)
    with torch.no_grad(), loss_parallel():
        saved = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(0, 1)).item()
        for p in model.parameters():  # spoil the weights, then load them back
            p.mul_(0.5)
        dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=ck)
        set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
        loaded = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(0, 1)).item()
    print(f"loss at save {saved:.6f}, after load {loaded:.6f}")


if __name__ == "__main__":
    main()
