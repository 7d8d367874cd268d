package org.mtpedge.engine;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/**
 * The bundle's precomputed tree-attention templates (manifest {@code extras["tree_templates"]}, written by
 * {@code mtpedge.runtime.tree_templates}): the fixed tree shapes of ESP's static trees, laid out at export time.
 * Each is checked once, when the bundle loads (its attention rows and position offsets must be those of its
 * parents array); a block whose parents equal a template's then reads the template's layout on every call
 * instead of laying the tree out. Port of the template part of {@code mtpedge.runtime.engine.Engine}.
 *
 * <pre>
 * {"name": "esp_w16_k1", "width": 16, "masks": 1, "widths": [7],
 *  "parents": [...], "depth": [...], "visible": ["1000...", ...]}   // visible[i][j] == '1': i attends j
 * </pre>
 */
public final class TreeTemplates {
    public static final String KEY = "tree_templates";

    /** Each template's layout, by the parents array it lays out (as {@link Arrays#toString(int[])}). */
    private final Map<String, TreeLayout> layouts;
    public final List<String> names;

    private TreeTemplates(Map<String, TreeLayout> layouts, List<String> names) {
        this.layouts = layouts;
        this.names = names;
    }

    /** The templates of a manifest's extras (none if it has none); BundleException if one is corrupt. */
    public static TreeTemplates fromExtras(Map<String, Object> extras) {
        Map<String, TreeLayout> layouts = new HashMap<>();
        List<String> names = new ArrayList<>();
        Object list = extras.get(KEY);
        if (list != null) {
            for (Object item : JsonValues.array(list, "manifest.extras." + KEY)) {
                Map<String, Object> template = JsonValues.object(item, "tree template");
                String name = JsonValues.stringField(template, "name", "tree template");
                int[] parents = JsonValues.intArray(JsonValues.field(template, "parents", name), name + ".parents");
                layouts.put(Arrays.toString(parents), checked(name, parents, template));
                names.add(name);
            }
        }
        return new TreeTemplates(layouts, Collections.unmodifiableList(names));
    }

    /** The template's layout, after checking it against the layout of its parents array. */
    private static TreeLayout checked(String name, int[] parents, Map<String, Object> template) {
        TreeLayout computed;
        try {
            computed = TreeLayout.of(parents);
        } catch (IllegalArgumentException err) {
            throw corrupt(name + ": " + err.getMessage());
        }
        int n = parents.length;
        List<Object> rows = JsonValues.arrayField(template, "visible", name);
        int[] depth = JsonValues.intArray(JsonValues.field(template, "depth", name), name + ".depth");
        boolean[][] visible = new boolean[n][n];
        if (rows.size() != n) {
            throw corrupt("template " + name + ": visible rows do not form a " + n + "-square");
        }
        for (int i = 0; i < n; i++) {
            String row = String.valueOf(rows.get(i));
            if (row.length() != n) {
                throw corrupt("template " + name + ": visible rows do not form a " + n + "-square");
            }
            for (int j = 0; j < n; j++) {
                visible[i][j] = row.charAt(j) == '1';
            }
        }
        if (!Arrays.deepEquals(visible, computed.visible)) {
            throw corrupt("template " + name + ": attention rows differ from its parents array");
        }
        if (!Arrays.equals(depth, computed.depth)) {
            throw corrupt("template " + name + ": position offsets differ from its parents array");
        }
        return new TreeLayout(visible, depth, computed.paths);
    }

    private static BundleException corrupt(String problem) {
        return new BundleException(problem + ": the bundle's tree templates are corrupt; re-run `mtpedge export`");
    }

    /** The layout of a block: its template's if the bundle has one for these parents, else laid out now. */
    public TreeLayout layoutFor(int[] parents) {
        TreeLayout layout = layouts.get(Arrays.toString(parents));
        return layout != null ? layout : TreeLayout.of(parents);
    }

    /** Whether a template covers this tree shape. */
    public boolean covers(int[] parents) {
        return layouts.containsKey(Arrays.toString(parents));
    }
}
