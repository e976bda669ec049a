"""The whole training step as one CUDA graph (--cuda-graphs): captured on the first step after a few eager steps
that settle what a capture needs, those steps undone, then replayed."""

from .compat import torch


def undo_warmup(model, optimizer):
    """A function that, called later, puts back the training state of now: the model's weights and buffers (batch
    norm's running statistics) and the optimizer's weights (the manual recipe's FP32 masters) copied back in place,
    and the optimizer's state zeroed, which is its state before a first step (SGD's first step sets its momentum to
    the gradient, 0.9 x 0 + g; AdamW's averages start at zero, its step count at 0). In place: a CUDA graph captured
    in between keeps the addresses it recorded."""
    tensors = [t for t in model.state_dict().values() if torch.is_tensor(t)]
    seen = set(id(t) for t in tensors)
    for group in optimizer.param_groups:
        tensors += [p for p in group["params"] if id(p) not in seen]
    saved = [(t, t.detach().clone()) for t in tensors]

    def undo():
        with torch.no_grad():
            for t, copy in saved:
                t.copy_(copy)
            for state in optimizer.state.values():
                for value in state.values():
                    if torch.is_tensor(value):
                        value.zero_()
        del saved[:]
    return undo


class GraphedStep(object):
    """The whole training step captured as one CUDA graph on its first call, then replayed: forward(x, y) copies
    the batch into the graph's input tensors and replays forward, backward and the optimizer's step together;
    backward and update have nothing left to do. Gradients are set to None before the capture, so the captured
    backward writes them afresh at every replay. The eager warm-up steps are undone (`undo`: undo_warmup's
    function), so the graphed training takes exactly the steps it counts, as eager training does."""

    WARMUP = 3  # eager steps on a side stream before the capture (optimizer state, cuDNN's choices, autotuning)

    def __init__(self, steps, undo=None):
        self.eager = steps
        self.undo = undo
        self.graph = None
        self.x = self.y = self.loss = None

    def capture(self, x, y):
        forward, backward, update = self.eager
        self.x, self.y = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP):
                backward(forward(self.x, self.y))
                update()  # ends with the gradients set to None
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # recorded, not run
            self.loss = forward(self.x, self.y)
            backward(self.loss)
            update()
        if self.undo is not None:
            self.undo()
        self.graph = graph

    def forward(self, x, y):
        if self.graph is None:
            self.capture(x, y)
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.graph.replay()
        return self.loss.detach().clone()  # the graph's loss tensor is rewritten by the next replay

    def nothing(self, loss=None):
        return None

    def steps(self):
        return self.forward, self.nothing, self.nothing
