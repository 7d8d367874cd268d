package org.mtpedge.engine.drafters;

import org.mtpedge.engine.DraftTree;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GraphOutput;

/**
 * The mask-slot half of ESP: mask embeddings, and the forecast read from the last call's mask slots of the
 * deepest accepted node (k rows of logits for depths 1..k under the next root); port of esp.MaskProbe.
 */
final class MaskProbe {
    final MaskEmbeddings masks;
    final int k;
    /** Learned masks trained with the adapter's LoRA: its gate goes on at the mask slots. */
    final boolean loraOnSlots;
    /** (k, vocab) logits, or null before the first decode call. */
    float[][] forecast;

    MaskProbe(Engine engine, MaskSettings settings) {
        MtpAdapter adapter = settings.init.equals("learned") ? MtpAdapter.load(engine) : null;
        this.masks = new MaskEmbeddings(settings.init, settings.slots, settings.updateRate, engine.embeddings,
                adapter == null ? null : adapter.masks);
        this.k = settings.slots;
        this.loraOnSlots = adapter != null && adapter.rank > 0;
    }

    void start(int[] promptIds) {
        masks.start(promptIds);
        forecast = null;
    }

    org.mtpedge.engine.Drafter.Proposal finishTree(int[] tokens, int[] parents) {
        return new org.mtpedge.engine.Drafter.Proposal(TreeBuild.attachMaskSlots(tokens, parents, k),
                masks.forOwners(tokens.length));
    }

    /** Read the forecast from the deepest accepted node's masks; fold the committed tokens into the masks. */
    void observe(DraftTree tree, int nTokens, GraphOutput out, int[] path) {
        int start = TreeBuild.maskSlotStart(nTokens, path[path.length - 1], k);
        forecast = new float[k][];
        for (int j = 0; j < k; j++) {
            forecast[j] = out.logitsRow(start + j);
        }
        int[] committed = new int[path.length];
        for (int i = 0; i < path.length; i++) {
            committed[i] = tree.token(path[i]);
        }
        masks.observeTokens(committed);
    }

    double[][] forecastScores() {
        double[][] out = new double[k][];
        for (int j = 0; j < k; j++) {
            out[j] = TreeBuild.toDouble(forecast[j]);
        }
        return out;
    }

    double[][] forecastProbs() {
        double[][] out = new double[k][];
        for (int j = 0; j < k; j++) {
            out[j] = TreeBuild.softmax(forecast[j]);
        }
        return out;
    }
}
