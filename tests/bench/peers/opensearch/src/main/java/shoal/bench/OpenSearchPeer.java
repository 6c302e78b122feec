package shoal.bench;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.opensearch.Version;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.PluginInfo;

/**
 * One real OpenSearch node in this JVM, started from the server jar on the
 * classpath with its two modules that the benchmarks need loaded as classpath
 * plugins: transport-netty4 (HTTP and node-to-node transport) and
 * analysis-common. No security plugin is on the classpath, so there is no
 * authentication and no TLS. The same Node class the distribution runs; what
 * the distribution's launcher adds around it (the bootstrap checks, the JVM
 * options file, the java agent that enforces plugin permissions) is left out.
 *
 * Arguments (all --key value):
 *   --name NAME --home DIR --http PORT --transport PORT
 *   --seeds host:port,...   other nodes' transport addresses (none: single-node)
 *   --cluster-managers n1,n2  the cluster-manager-eligible nodes' names
 *   --roles r1,r2 | --roles ""  (empty: coordinating-only)
 *   --cluster NAME
 *   --transport-publish PORT  the transport port the other nodes are told to
 *                          connect to (a delay proxy in front of --transport)
 * Stops on SIGTERM (closes the node).
 */
public final class OpenSearchPeer {

    /** Node's constructor that takes classpath plugins is protected. */
    static final class PeerNode extends Node {
        PeerNode(Environment env, Collection<PluginInfo> plugins) {
            super(env, plugins, true);
        }
    }

    static PluginInfo classpathPlugin(String name, String className) {
        return new PluginInfo(name, name + " (classpath module)", Version.CURRENT.toString(), Version.CURRENT,
            "21", className, null, Collections.emptyList(), false);
    }

    public static void main(String[] args) throws Exception {
        String name = "node-0", home = null, http = null, transport = null, seeds = "", managers = null;
        String roles = null, cluster = "shoal-bench", publish = null;
        for (int i = 0; i + 1 < args.length; i += 2) {
            String v = args[i + 1];
            switch (args[i]) {
                case "--name" -> name = v;
                case "--home" -> home = v;
                case "--http" -> http = v;
                case "--transport" -> transport = v;
                case "--seeds" -> seeds = v;
                case "--cluster-managers" -> managers = v;
                case "--roles" -> roles = v;
                case "--cluster" -> cluster = v;
                case "--transport-publish" -> publish = v;
                default -> throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (home == null || http == null || transport == null || args.length % 2 != 0) {
            System.err.println("usage: OpenSearchPeer --name N --home DIR --http PORT --transport PORT"
                + " [--seeds h:p,...] [--cluster-managers n,...] [--roles r,...] [--cluster NAME]");
            System.exit(2);
        }
        Path homeDir = Path.of(home).toAbsolutePath();
        Files.createDirectories(homeDir.resolve("config"));
        Files.createDirectories(homeDir.resolve("plugins"));
        Files.createDirectories(homeDir.resolve("modules"));
        Files.createDirectories(homeDir.resolve("data"));
        Files.createDirectories(homeDir.resolve("logs"));

        Settings.Builder b = Settings.builder()
            .put("cluster.name", cluster)
            .put("node.name", name)
            .put("path.home", homeDir.toString())
            .put("path.data", homeDir.resolve("data").toString())
            .put("path.logs", homeDir.resolve("logs").toString())
            .put("network.host", "127.0.0.1")
            .put("http.port", http)
            .put("transport.port", transport)
            // the benchmark machine's disk is shared: don't let a watermark
            // turn indexes read-only in the middle of a run
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put("bootstrap.memory_lock", false);
        if (publish != null) {
            b.put("transport.publish_port", publish);
        }
        if (seeds.isEmpty()) {
            b.put("discovery.type", "single-node");
        } else {
            b.putList("discovery.seed_hosts", Arrays.asList(seeds.split(",")));
            if (managers != null) {
                b.putList("cluster.initial_cluster_manager_nodes", Arrays.asList(managers.split(",")));
            }
        }
        if (roles != null) {
            List<String> r = new ArrayList<>();
            for (String s : roles.split(",")) if (!s.isBlank()) r.add(s.trim());
            b.putList("node.roles", r);
        }
        Settings settings = b.build();

        LogConfigurator.registerErrorListener();
        LogConfigurator.setNodeName(name);
        LogConfigurator.configureWithoutConfig(settings);

        Environment env = InternalSettingsPreparer.prepareEnvironment(settings, Collections.emptyMap(),
            homeDir.resolve("config"), () -> "node");
        List<PluginInfo> plugins = List.of(
            classpathPlugin("transport-netty4", "org.opensearch.transport.Netty4ModulePlugin"),
            classpathPlugin("analysis-common", "org.opensearch.analysis.common.CommonAnalysisModulePlugin"));
        Node node = new PeerNode(env, plugins);

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
                node.awaitClose(20, TimeUnit.SECONDS);
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }, "peer-shutdown"));

        node.start();
        System.out.printf("OpenSearchPeer: OpenSearch %s (Lucene %s) node %s started: http 127.0.0.1:%s,"
            + " transport 127.0.0.1:%s, roles %s, max heap %d MiB, java %s, pid %d%n",
            Version.CURRENT, org.apache.lucene.util.Version.LATEST, name, http, transport,
            roles == null ? "(default: all)" : "[" + roles + "]",
            Runtime.getRuntime().maxMemory() >> 20, Runtime.version(), ProcessHandle.current().pid());
        System.out.flush();
        stopped.await();
    }
}
