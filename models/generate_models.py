#!/usr/bin/env python3
"""Writes Nereid's model files (models/*.pbtxt) as protobuf text.

The files are checked in, and tests/models_up_to_date_test.sh fails when they
differ from what this script writes, so edit this script and re-run it:

    python3 models/generate_models.py            # writes into models/
    python3 models/generate_models.py --out DIR  # writes elsewhere

Conventions (see graph/graph.proto): NCHW activations, OIHW filters, MatMul
weights as [in, out], batch dimension -1. Every parameter has its own seed.
The layers come from models/nereid_builder.py, which asks Nereid for each
layer's input size (so it needs a built nereid binary).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nereid_builder import Model  # noqa: E402


FASHION = ("fashion-mnist", [-1, 1, 28, 28])
CIFAR = ("cifar10", [-1, 3, 32, 32])


def mlp_fashion():
    m = Model("mlp_fashion", "784-512-512-10 perceptron with ReLU on Fashion-MNIST", FASHION[0], 10)
    x = m.input("images", FASHION[1], feed="images")
    x = m.node("flatten", "Flatten", [x])
    x = m.dense("fc1", x, 512)
    x = m.dense("fc2", x, 512)
    x = m.dense("fc3", x, 10, activation=None, init="glorot_uniform")
    m.classifier_head(x)
    return m


def lenet_fashion():
    m = Model(
        "lenet_fashion",
        "LeNet-5 on 28x28 Fashion-MNIST (conv 6@5x5 pad 2, pool, conv 16@5x5, pool, 120-84-10; ReLU, max pooling)",
        FASHION[0], 10)
    x = m.input("images", FASHION[1], feed="images")
    x = m.conv("conv1", x, 6, 5, pad=2)
    x = m.node("conv1/relu", "Relu", [x])
    x = m.pool("pool1", x)
    x = m.conv("conv2", x, 16, 5)
    x = m.node("conv2/relu", "Relu", [x])
    x = m.pool("pool2", x)
    x = m.node("flatten", "Flatten", [x])
    x = m.dense("fc1", x, 120)
    x = m.dense("fc2", x, 84)
    x = m.dense("fc3", x, 10, activation=None, init="glorot_uniform")
    m.classifier_head(x)
    return m


VGG_CONFIGS = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
}


def vgg_cifar(depth, batch_norm):
    name = "%s%s_cifar" % (depth, "_bn" if batch_norm else "")
    m = Model(
        name,
        "%s on 32x32x3 CIFAR-10 input (3x3 convolutions%s), with the SplitBrain-style classifier "
        "512-4096-4096-10 whose fully connected layers dominate memory" %
        (depth.upper(), ", batch norm" if batch_norm else ""),
        CIFAR[0], 10)
    x = m.input("images", CIFAR[1], feed="images")
    conv_index, pool_index = 0, 0
    for item in VGG_CONFIGS[depth]:
        if item == "M":
            pool_index += 1
            x = m.pool("pool%d" % pool_index, x)
            continue
        conv_index += 1
        scope = "conv%d" % conv_index
        x = m.conv(scope, x, item, 3, pad=1, bias=not batch_norm)
        if batch_norm:
            x = m.batch_norm(scope + "/bn", x)
        x = m.node(scope + "/relu", "Relu", [x])
    x = m.node("flatten", "Flatten", [x])
    x = m.dense("fc1", x, 4096)
    x = m.node("fc1/dropout", "Dropout", [x], [("rate", "f: 0.5"), ("seed", "i: 101")])
    x = m.dense("fc2", x, 4096)
    x = m.node("fc2/dropout", "Dropout", [x], [("rate", "f: 0.5"), ("seed", "i: 102")])
    x = m.dense("fc3", x, 10, activation=None, init="glorot_uniform")
    m.classifier_head(x)
    return m


def resnet20(name="resnet20_cifar", data=CIFAR, data_name="CIFAR-10"):
    m = Model(
        name,
        "ResNet-20 (He et al. 2016, 3 stages x 3 basic blocks, 16/32/64 channels) on %s; "
        "projection shortcuts (1x1 conv + batch norm) where the shape changes" % data_name,
        data[0], 10)
    x = m.input("images", data[1], feed="images")
    x = m.conv("stem", x, 16, 3, pad=1, bias=False)
    x = m.batch_norm("stem/bn", x)
    x = m.node("stem/relu", "Relu", [x])
    for stage, c_out in enumerate([16, 32, 64], start=1):
        for block in range(1, 4):
            scope = "stage%d/block%d" % (stage, block)
            stride = 2 if (block == 1 and stage > 1) else 1
            c_in = m.shape(x)[1]
            y = m.conv(scope + "/conv1", x, c_out, 3, stride=stride, pad=1, bias=False)
            y = m.batch_norm(scope + "/bn1", y)
            y = m.node(scope + "/relu1", "Relu", [y])
            y = m.conv(scope + "/conv2", y, c_out, 3, pad=1, bias=False)
            y = m.batch_norm(scope + "/bn2", y)
            shortcut = x
            if stride != 1 or c_in != c_out:
                shortcut = m.conv(scope + "/shortcut", x, c_out, 1, stride=stride, bias=False)
                shortcut = m.batch_norm(scope + "/shortcut_bn", shortcut)
            y = m.node(scope + "/add", "Add", [y, shortcut])
            x = m.node(scope + "/relu2", "Relu", [y])
    x = m.node("global_pool", "GlobalAvgPool", [x])
    x = m.dense("fc", x, 10, activation=None, init="glorot_uniform")
    m.classifier_head(x)
    return m


def linear_fashion(name, description, loss_op):
    m = Model(name, description, FASHION[0], 10)
    x = m.input("images", FASHION[1], feed="images")
    x = m.node("flatten", "Flatten", [x])
    x = m.dense("linear", x, 10, activation=None, init="zeros")
    m.classifier_head(x, loss_op)
    return m


def char_transformer(layers=4, width=256, heads=4, context=128, vocabulary=256, name="char_transformer",
                     dataset="fortunes"):
    """A decoder-only transformer over bytes: token and position embeddings,
    pre-LayerNorm blocks with causal attention and a GELU MLP, a final
    LayerNorm, and logits through the token embedding (tied)."""
    m = Model(name, "decoder-only transformer, %d layers of width %d, %d heads, context %d, tied byte embeddings"
              % (layers, width, heads, context), dataset, vocabulary)
    ids = m.input("ids", [-1, context], dtype="DT_INT64", feed="images")
    table = m.parameter("embedding/tokens", [vocabulary, width], "normal", stddev=0.02)
    positions = m.parameter("embedding/positions", [context, width], "normal", stddev=0.01)
    x = m.node("embedding/lookup", "Gather", [table, ids])
    x = m.node("embedding/sum", "Add", [x, positions])
    out_stddev = 0.02 / (2 * layers) ** 0.5  # GPT-2's scaling of the residual projections
    for i in range(layers):
        x = m.transformer_block("block%d" % i, x, width, heads, context, out_stddev)
    x = m.layer_norm("final", x, width)
    logits = m.node("head", "BatchMatMul", [x, table], [("transpose_b", "b: true")])
    m.classifier_head(logits, positions=context)
    return m


def all_models():
    return [
        mlp_fashion(),
        lenet_fashion(),
        vgg_cifar("vgg11", batch_norm=False),
        vgg_cifar("vgg11", batch_norm=True),
        vgg_cifar("vgg16", batch_norm=False),
        resnet20(),
        resnet20("resnet20_fashion", FASHION, "Fashion-MNIST"),
        linear_fashion("logreg_fashion", "multinomial logistic regression (softmax) on Fashion-MNIST pixels",
                       "SoftmaxCrossEntropy"),
        linear_fashion("svm_fashion", "linear multi-class SVM (Weston-Watkins hinge loss) on Fashion-MNIST pixels",
                       "HingeLoss"),
        char_transformer(),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="directory to write into (default: models/)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for model in all_models():
        path = os.path.join(args.out, model.name + ".pbtxt")
        with open(path, "w") as f:
            f.write(model.render())


if __name__ == "__main__":
    main()
